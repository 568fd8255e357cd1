package lossy

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a UDP server on 127.0.0.1 that sends every datagram back.
func echo(t *testing.T) string {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = conn.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return conn.LocalAddr().String()
}

// roundTrips sends n numbered datagrams through p to the echo server and
// returns the numbers that came back, in the order they came, reading
// until a second passes without one.
func roundTrips(t *testing.T, p *Proxy, n int) []uint32 {
	c, err := net.Dial("udp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	got := make(chan []uint32)
	go func() { // reading as they come, so that the socket's buffer holds
		var nums []uint32
		buf := make([]byte, 16)
		for {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			k, err := c.Read(buf)
			if err != nil || k != 4 {
				got <- nums
				return
			}
			nums = append(nums, binary.BigEndian.Uint32(buf))
		}
	}()
	for i := range n {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i))
		_, err := c.Write(b[:])
		require.NoError(t, err)
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // within the sockets' buffers
		}
	}
	return <-got
}

func TestCleanLinkDeliversInOrder(t *testing.T) {
	p, err := Start(echo(t), Link{}, Link{}, 1)
	require.NoError(t, err)
	defer p.Close()
	got := roundTrips(t, p, 500)
	require.Len(t, got, 500)
	for i, v := range got {
		require.Equal(t, uint32(i), v)
	}
	delivered, dropped := p.Stats()
	assert.Equal(t, int64(1000), delivered)
	assert.Zero(t, dropped)
}

func TestLossDropsItsShareBothWays(t *testing.T) {
	p, err := Start(echo(t), Link{Loss: 0.2}, Link{Loss: 0.2}, 7)
	require.NoError(t, err)
	defer p.Close()
	const n = 2000
	got := roundTrips(t, p, n)
	delivered, dropped := p.Stats()
	// Each way loses about a fifth: about 0.8 × 0.8 of them come back.
	assert.InDelta(t, 0.64*n, float64(len(got)), 0.06*n)
	assert.InDelta(t, 0.2, float64(dropped)/float64(delivered+dropped), 0.03)
}

func TestJitterReorders(t *testing.T) {
	p, err := Start(echo(t), Link{Delay: time.Millisecond, Jitter: 20 * time.Millisecond}, Link{}, 3)
	require.NoError(t, err)
	defer p.Close()
	got := roundTrips(t, p, 300)
	require.Len(t, got, 300, "jitter loses nothing")
	reordered := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			reordered++
		}
	}
	assert.Positive(t, reordered, "a jitter longer than the gaps reorders")
}

func TestStartRefusesCertainLoss(t *testing.T) {
	_, err := Start("127.0.0.1:1", Link{Loss: 1}, Link{}, 0)
	assert.Error(t, err)
}

func TestCloseDropsWhatIsDelayed(t *testing.T) {
	p, err := Start(echo(t), Link{Delay: time.Hour}, Link{}, 0)
	require.NoError(t, err)
	c, err := net.Dial("udp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("late"))
	require.NoError(t, err)
	require.NoError(t, p.Close()) // returns, though a datagram waits an hour
	require.NoError(t, p.Close(), "a second Close does nothing")
}
