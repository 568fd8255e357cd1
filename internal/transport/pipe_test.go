package transport_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/internal/transport"
)

// pipeTest runs f in a synctest bubble over a fresh Pipe.
func pipeTest(t *testing.T, cfg transport.PipeConfig, f func(t *testing.T, a, b *transport.PipeConn)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		a, b := transport.Pipe(cfg)
		t.Cleanup(func() { _ = a.CloseWithError(0, "") })
		f(t, a, b)
	})
}

// async runs f on a goroutine of the bubble; the channel gets its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// blocked reports whether nothing has arrived on ch once the bubble is
// idle.
func blocked[T any](ch <-chan T) bool {
	synctest.Wait()
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func TestPipeStreamDelivers(t *testing.T) {
	pipeTest(t, transport.PipeConfig{}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenStreamSync(t.Context())
		require.NoError(t, err)
		accepted := make(chan transport.Stream, 1)
		go func() {
			str, err := b.AcceptStream(context.Background())
			if err == nil {
				accepted <- str
			}
		}()
		assert.True(t, blocked(accepted), "a stream nothing was sent on is not seen")

		_, err = s.Write([]byte("hello"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		r := <-accepted
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(got))
		assert.Error(t, s.Context().Err(), "the send side is done after Close")

		_, err = r.Write([]byte("back"))
		require.NoError(t, err)
		require.NoError(t, r.Close())
		got, err = io.ReadAll(s)
		require.NoError(t, err)
		assert.Equal(t, "back", string(got))

		_, err = s.Write([]byte("x"))
		assert.Error(t, err, "write after FIN")
	})
}

// TestPipePriority: streams start at the urgencies the QUIC Conn gives
// them and keep what SetPriority sets, clipped; WebTransport ignores it.
func TestPipePriority(t *testing.T) {
	type prioritized interface{ Priority() (int8, bool) }
	for _, wt := range []bool{false, true} {
		pipeTest(t, transport.PipeConfig{WebTransport: wt}, func(t *testing.T, a, b *transport.PipeConn) {
			bs, err := a.OpenStreamSync(t.Context())
			require.NoError(t, err)
			us, err := a.OpenUniStreamSync(t.Context())
			require.NoError(t, err)
			u, inc := bs.(prioritized).Priority()
			assert.Equal(t, []any{transport.UrgencyRequest, true}, []any{u, inc})
			u, inc = us.(prioritized).Priority()
			assert.Equal(t, []any{transport.UrgencyControl, false}, []any{u, inc})
			us.SetPriority(9, true)
			u, inc = us.(prioritized).Priority()
			if wt {
				assert.Equal(t, []any{transport.UrgencyControl, false}, []any{u, inc}, "no effect on WebTransport")
			} else {
				assert.Equal(t, []any{int8(7), true}, []any{u, inc}, "clipped to 7")
			}
		})
	}
}

func TestPipeFlowControl(t *testing.T) {
	pipeTest(t, transport.PipeConfig{StreamWindow: 16, ConnectionWindow: 24, SendBuffer: -1}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenUniStreamSync(t.Context())
		require.NoError(t, err)
		written := async(func() error { _, err := s.Write(make([]byte, 40)); return err })
		assert.True(t, blocked(written), "the writer waits for the reader")

		r, err := b.AcceptUniStream(t.Context())
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, err := r.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, 16, n, "a window's worth was taken")

		// A second stream shares the connection window: 16 bytes of the
		// first are unread again, 8 are left.
		synctest.Wait()
		s2, err := a.OpenUniStreamSync(t.Context())
		require.NoError(t, err)
		written2 := async(func() error { _, err := s2.Write(make([]byte, 10)); return err })
		assert.True(t, blocked(written2), "the connection window is spent")

		total := n
		for total < 40 {
			n, err := r.Read(buf)
			require.NoError(t, err)
			total += n
		}
		require.NoError(t, <-written)
		require.NoError(t, <-written2)
	})
}

// TestPipeSendBuffer: a write that fits the send buffer returns at once,
// as quic-go's does, and its bytes follow as the receiver reads; one that
// does not waits for the window.
func TestPipeSendBuffer(t *testing.T) {
	pipeTest(t, transport.PipeConfig{StreamWindow: 8, SendBuffer: 20}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenUniStreamSync(t.Context())
		require.NoError(t, err)
		n, err := s.Write([]byte("0123456789abcdefghij")) // 8 in the window, 12 buffered
		require.NoError(t, err)
		assert.Equal(t, 20, n)
		written := async(func() error { _, err := s.Write([]byte("0123456789")); return err })
		assert.True(t, blocked(written), "the buffer is full")
		r, err := b.AcceptUniStream(t.Context())
		require.NoError(t, err)
		got := make([]byte, 30)
		_, err = io.ReadFull(r, got)
		require.NoError(t, err)
		assert.Equal(t, "0123456789abcdefghij0123456789", string(got), "in order")
		require.NoError(t, <-written)
		require.NoError(t, s.Close())
		_, err = r.Read(got)
		assert.Equal(t, io.EOF, err)

		// The FIN follows what waits in the send buffer.
		s, err = a.OpenUniStreamSync(t.Context())
		require.NoError(t, err)
		_, err = s.Write([]byte("0123456789abcdefghij"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		r, err = b.AcceptUniStream(t.Context())
		require.NoError(t, err)
		all, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, "0123456789abcdefghij", string(all))
	})
}

func TestPipeWriteDeadline(t *testing.T) {
	pipeTest(t, transport.PipeConfig{StreamWindow: 16, SendBuffer: -1}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenUniStreamSync(t.Context())
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, s.SetWriteDeadline(start.Add(time.Second)))
		n, err := s.Write(make([]byte, 40))
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.Equal(t, 16, n, "the bytes taken are counted")
		assert.Equal(t, time.Second, time.Since(start))

		// A deadline set while a Write waits cuts it short.
		require.NoError(t, s.SetWriteDeadline(time.Time{}))
		written := async(func() error { _, err := s.Write([]byte("x")); return err })
		assert.True(t, blocked(written))
		require.NoError(t, s.SetWriteDeadline(time.Now()))
		assert.ErrorIs(t, <-written, os.ErrDeadlineExceeded)
		_ = b
	})
}

func TestPipeResetStream(t *testing.T) {
	for _, c := range []struct {
		name     string
		reliable bool
		window   int // 2: part of what was written waits in the send buffer
		want     string
	}{
		{"RESET_STREAM", false, 0, ""},
		{"RESET_STREAM_AT", true, 0, "kept"},
		{"RESET_STREAM/send buffer", false, 2, ""},
		{"RESET_STREAM_AT/send buffer", true, 2, "kept"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pipeTest(t, transport.PipeConfig{ReliableReset: c.reliable, StreamWindow: c.window}, func(t *testing.T, a, b *transport.PipeConn) {
				assert.Equal(t, c.reliable, a.ReliableReset())
				s, err := a.OpenUniStreamSync(t.Context())
				require.NoError(t, err)
				_, err = s.Write([]byte("kept"))
				require.NoError(t, err)
				s.SetReliableBoundary()
				_, err = s.Write([]byte("lost"))
				require.NoError(t, err)
				r, err := b.AcceptUniStream(t.Context())
				require.NoError(t, err)

				s.CancelWrite(0x15)
				got, err := io.ReadAll(r)
				assert.Equal(t, c.want, string(got))
				var se *transport.StreamError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, transport.StreamError{Code: 0x15, Remote: true}, *se)

				_, err = s.Write([]byte("x"))
				require.ErrorAs(t, err, &se)
				assert.Equal(t, transport.StreamError{Code: 0x15}, *se)
				assert.Error(t, s.Context().Err())
				assert.Error(t, s.Close(), "Close after CancelWrite")
			})
		})
	}
}

func TestPipeStopSending(t *testing.T) {
	pipeTest(t, transport.PipeConfig{StreamWindow: 8, SendBuffer: -1}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenStreamSync(t.Context())
		require.NoError(t, err)
		written := async(func() error { _, err := s.Write(make([]byte, 20)); return err })
		r, err := b.AcceptStream(t.Context())
		require.NoError(t, err)
		assert.True(t, blocked(written))

		r.CancelRead(0x7)
		var se *transport.StreamError
		require.ErrorAs(t, <-written, &se, "the blocked write returns")
		assert.Equal(t, transport.StreamError{Code: 0x7, Remote: true}, *se)
		<-s.Context().Done()
		_, err = r.Read(make([]byte, 1))
		require.ErrorAs(t, err, &se)
		assert.Equal(t, transport.StreamError{Code: 0x7}, *se)

		// The other direction is untouched.
		_, err = r.Write([]byte("ok"))
		require.NoError(t, err)
		require.NoError(t, r.Close())
		got, err := io.ReadAll(s)
		require.NoError(t, err)
		assert.Equal(t, "ok", string(got))
	})
}

func TestPipeStreamCredit(t *testing.T) {
	pipeTest(t, transport.PipeConfig{MaxIncomingUniStreams: 2, MaxIncomingStreams: 1}, func(t *testing.T, a, b *transport.PipeConn) {
		var open []transport.SendStream
		for range 2 {
			s, err := a.OpenUniStream()
			require.NoError(t, err)
			_, err = s.Write([]byte("x"))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			open = append(open, s)
		}
		_, err := a.OpenUniStream()
		assert.Error(t, err, "no credit: OpenUniStream fails at once")

		opened := make(chan transport.SendStream, 1)
		go func() {
			s, err := a.OpenUniStreamSync(context.Background())
			if err == nil {
				opened <- s
			}
		}()
		assert.True(t, blocked(opened), "OpenUniStreamSync waits for credit")

		r, err := b.AcceptUniStream(t.Context())
		require.NoError(t, err)
		assert.True(t, blocked(opened), "an accepted stream still counts")
		_, err = io.ReadAll(r)
		require.NoError(t, err)
		<-opened // read to its FIN, the stream gives its credit back

		// A bidirectional stream counts until both directions are done.
		bs, err := a.OpenStreamSync(t.Context())
		require.NoError(t, err)
		require.NoError(t, bs.Close())
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err = a.OpenStreamSync(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		br, err := b.AcceptStream(t.Context())
		require.NoError(t, err)
		_, err = io.ReadAll(br)
		require.NoError(t, err)
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		_, err = a.OpenStreamSync(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the receiver's direction is still open")
		br.CancelWrite(0)
		_, err = a.OpenStreamSync(t.Context())
		assert.NoError(t, err)
	})
}

// TestPipeEOFWithLastBytes: a Read that takes a finished stream's last
// bytes returns io.EOF with them and gives the stream's credit back, as
// quic-go's does: a reader's buffer that takes a small stream whole has
// ended it for the peer, whatever the application has yet to read.
func TestPipeEOFWithLastBytes(t *testing.T) {
	pipeTest(t, transport.PipeConfig{MaxIncomingUniStreams: 1}, func(t *testing.T, a, b *transport.PipeConn) {
		s, err := a.OpenUniStream()
		require.NoError(t, err)
		_, err = s.Write([]byte("abc"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		r, err := b.AcceptUniStream(t.Context())
		require.NoError(t, err)
		got := make([]byte, 8)
		n, err := r.Read(got)
		assert.Equal(t, "abc", string(got[:n]))
		assert.Equal(t, io.EOF, err)
		_, err = a.OpenUniStream()
		assert.NoError(t, err, "the credit is back")
	})
}

func TestPipeAcceptCancelled(t *testing.T) {
	pipeTest(t, transport.PipeConfig{}, func(t *testing.T, a, b *transport.PipeConn) {
		ctx, cancel := context.WithCancel(t.Context())
		accepted := async(func() error { _, err := b.AcceptUniStream(ctx); return err })
		dgram := async(func() error { _, err := b.ReceiveDatagram(ctx); return err })
		assert.True(t, blocked(accepted))
		cancel()
		assert.ErrorIs(t, <-accepted, context.Canceled)
		assert.ErrorIs(t, <-dgram, context.Canceled)
		assert.NoError(t, a.Context().Err(), "the connection goes on")
	})
}

func TestPipeDatagrams(t *testing.T) {
	dropped := 0
	cfg := transport.PipeConfig{MaxDatagramSize: 10, DatagramQueue: 2, DropDatagram: func(b []byte) bool {
		if string(b) == "drop" {
			dropped++
			return true
		}
		return false
	}}
	pipeTest(t, cfg, func(t *testing.T, a, b *transport.PipeConn) {
		assert.Error(t, a.SendDatagram(make([]byte, 11)), "too large")
		buf := []byte("one")
		require.NoError(t, a.SendDatagram(buf))
		buf[0] = 'X' // the caller may reuse it
		require.NoError(t, a.SendDatagram([]byte("drop")))
		require.NoError(t, a.SendDatagram([]byte("two")))
		require.NoError(t, a.SendDatagram([]byte("three")), "a full queue drops, silently")
		assert.Equal(t, 1, dropped)
		for _, want := range []string{"one", "two"} {
			got, err := b.ReceiveDatagram(t.Context())
			require.NoError(t, err)
			assert.Equal(t, want, string(got))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := b.ReceiveDatagram(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the third was dropped")
	})
}

func TestPipeClose(t *testing.T) {
	for _, wt := range []bool{false, true} {
		t.Run(map[bool]string{false: "quic", true: "webtransport"}[wt], func(t *testing.T) {
			pipeTest(t, transport.PipeConfig{WebTransport: wt, StreamWindow: 4, SendBuffer: -1}, func(t *testing.T, a, b *transport.PipeConn) {
				s, err := a.OpenStreamSync(t.Context())
				require.NoError(t, err)
				written := async(func() error { _, err := s.Write(make([]byte, 10)); return err })
				r, err := b.AcceptStream(t.Context())
				require.NoError(t, err)
				read := async(func() error { _, err := s.Read(make([]byte, 1)); return err })
				accepted := async(func() error { _, err := b.AcceptUniStream(context.Background()); return err })
				assert.True(t, blocked(written))

				code := uint64(1) << 40
				wantCode := code
				if wt {
					wantCode = transport.MaxWebTransportCode
				}
				reason := strings.Repeat("é", 600)
				require.NoError(t, b.CloseWithError(code, reason))
				want := transport.CloseError{Code: wantCode, Reason: reason[:1024]}
				var ce *transport.CloseError
				for _, err := range []error{<-accepted, context.Cause(b.Context())} {
					require.ErrorAs(t, err, &ce)
					assert.Equal(t, want, *ce, "local")
				}
				want.Remote = true
				for _, err := range []error{<-written, <-read, context.Cause(a.Context()), context.Cause(s.Context()), a.SendDatagram(nil)} {
					require.ErrorAs(t, err, &ce)
					assert.Equal(t, want, *ce, "remote")
				}
				assert.ErrorIs(t, context.Cause(a.Context()), net.ErrClosed)
				_, err = r.Read(make([]byte, 1))
				assert.ErrorAs(t, err, &ce)
				_, err = a.OpenUniStreamSync(t.Context())
				assert.ErrorAs(t, err, &ce)
				require.NoError(t, a.CloseWithError(9, "late"), "a second close changes nothing")
				assert.Equal(t, want, *context.Cause(a.Context()).(*transport.CloseError))
			})
		})
	}
}

func TestPipeLose(t *testing.T) {
	pipeTest(t, transport.PipeConfig{}, func(t *testing.T, a, b *transport.PipeConn) {
		received := async(func() error { _, err := b.ReceiveDatagram(context.Background()); return err })
		a.Lose()
		for _, err := range []error{<-received, context.Cause(a.Context())} {
			var ce *transport.ConnError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, transport.ConnIdleTimeout, ce.Kind)
			assert.True(t, errors.Is(err, net.ErrClosed))
		}
	})
}

// TestPipeLeavesNoGoroutines: outside a bubble too, a Pipe's waits run on
// their callers' goroutines, and a close releases every one of them.
func TestPipeLeavesNoGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	a, b := transport.Pipe(transport.PipeConfig{StreamWindow: 4, SendBuffer: -1})
	s, err := a.OpenStreamSync(t.Context())
	require.NoError(t, err)
	waits := []<-chan error{
		async(func() error { _, err := s.Write(make([]byte, 10)); return err }),
		async(func() error { _, err := s.Read(make([]byte, 1)); return err }),
		async(func() error { _, err := b.AcceptUniStream(context.Background()); return err }),
		async(func() error { _, err := a.ReceiveDatagram(context.Background()); return err }),
	}
	require.NoError(t, a.CloseWithError(0, "done"))
	for _, w := range waits {
		assert.Error(t, <-w)
	}
	goleak.VerifyNone(t, before)
}
