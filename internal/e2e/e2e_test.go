package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/internal/lossy"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moqt-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := buildPrograms(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The publisher's pace: groups of objectsPerGroup objects, one per
// interval. It publishes until the test has every reader in place, then
// ends the track and exits.
const (
	objectsPerGroup = 10
	interval        = "100ms"
)

// TestEndToEnd runs a relay, a publisher and subscribers as separate
// processes, over raw QUIC and WebTransport, with the publisher announcing
// its namespace (PUBLISH_NAMESPACE, found by SUBSCRIBE_NAMESPACE) or
// offering its track (PUBLISH). Every subscriber must get every object
// its filter and reported Largest Object promise, once, and then the
// publisher's TRACK_ENDED, though the publisher exits as soon as it has
// ended the track:
//   - cold: the first subscriber, joining mid-group, while the relay has
//     no upstream subscription yet;
//   - unfiltered: no Location filter, joining mid-group: its stream of that
//     group is reset at the group's end (§11.3.2), which the read loop
//     learns in band and goes on;
//   - warm: joining mid-group, the relay subscribed upstream already;
//   - fill: joining mid-group with a fill of the current group (§3.5);
//   - discover: finding the namespace with SUBSCRIBE_NAMESPACE first;
//   - fetch: a FETCH of the first two groups.
//
// Each reader joins at the next mid-group point the publisher reaches once
// the one before is in place, so a slow machine only slows the test down.
func TestEndToEnd(t *testing.T) {
	for _, mode := range []string{"announce", "publish"} {
		for _, scheme := range []string{"moqt", "https"} {
			t.Run(mode+"/"+scheme, func(t *testing.T) {
				t.Parallel()
				runScenario(t, scheme, mode == "publish", drafts{}, nil)
			})
		}
	}
}

// at matches the publisher's line for object o of any group from minGroup.
func at(minGroup, o uint64) func(string) bool {
	return func(l string) bool {
		var g, id uint64
		_, err := fmt.Sscanf(l, "pub %d %d", &g, &id)
		return err == nil && g >= minGroup && id == o
	}
}

// TestEndToEndAcrossDrafts is TestEndToEnd with the publisher and its
// readers each held to one MoQT draft, different ones meeting in the relay:
// every reader gets what it was promised whatever draft the publisher
// speaks (a fill is a joining FETCH on 18 and 19, a fill stream on 20 and
// 21).
func TestEndToEndAcrossDrafts(t *testing.T) {
	for _, c := range []struct {
		name    string
		scheme  string
		publish bool
		d       drafts
	}{
		{"pub18/moqt", "moqt", false, drafts{pub: 18, readers: []uint{21, 20, 19, 21, 18, 20}}},
		{"pub21-publish/https", "https", true, drafts{pub: 21, readers: []uint{18, 19, 18, 19, 18}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, c.scheme, c.publish, c.d, nil)
		})
	}
}

// TestEndToEndLossy is TestEndToEnd with every process reaching the relay
// over a path of its own that loses 3% of the datagrams each way, delays
// each by 5 to 25 ms and so reorders them: QUIC recovers what is lost, and
// every reader still gets every object it was promised, once, and the
// track's end.
func TestEndToEndLossy(t *testing.T) {
	path := &lossy.Link{Loss: 0.03, Delay: 5 * time.Millisecond, Jitter: 20 * time.Millisecond}
	for _, c := range []struct {
		name    string
		scheme  string
		publish bool
	}{
		{"announce/moqt", "moqt", false},
		{"publish/https", "https", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, c.scheme, c.publish, drafts{}, path)
		})
	}
}

// drafts holds the publisher and the readers (in the order they join, the
// last repeated) to one draft each; zero offers every draft.
type drafts struct {
	pub     uint
	readers []uint
}

func (d drafts) reader(i int) uint {
	if len(d.readers) == 0 {
		return 0
	}
	return d.readers[min(i, len(d.readers)-1)]
}

func runScenario(t *testing.T, scheme string, publish bool, d drafts, path *lossy.Link) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startRelay(t, ctx)
	// url is where one process reaches the relay: directly, or over a
	// path of its own that loses, delays and reorders.
	seed := uint64(0)
	url := func() string {
		if path == nil {
			return r.url(scheme)
		}
		seed++
		p, err := lossy.Start(r.addr, *path, *path, seed)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		return scheme + "://" + p.Addr() + "/"
	}
	sub := func(name string, args ...string) *proc {
		return start(t, name, programs.sub, append([]string{"-url", url(), "-sha256", r.sha256, "-timeout", "4m"}, args...)...)
	}
	pubArgs := []string{"-url", url(), "-sha256", r.sha256, "-groups", "0",
		"-objects", strconv.Itoa(objectsPerGroup), "-interval", interval,
		"-draft", strconv.Itoa(int(d.pub))}
	if publish {
		pubArgs = append(pubArgs, "-publish")
	}
	pub := start(t, "pub", programs.pub, pubArgs...)
	pub.waitLine(t, ctx, "ready")

	type reader struct {
		p     *proc
		kind  string
		draft uint
	}
	var readers []reader
	join := func(match func(string) bool, kind, name string, args ...string) {
		pub.nextLine(t, ctx, "a mid-group point", match)
		draft := d.reader(len(readers))
		p := sub(name, append([]string{"-draft", strconv.Itoa(int(draft))}, args...)...)
		readers = append(readers, reader{p, kind, draft})
		p.waitLine(t, ctx, "ok ") // subscribed: the next joins after it
	}
	join(at(1, 4), "next", "cold")
	join(at(1, 6), "unfiltered", "unfiltered", "-filter", "none")
	join(at(1, 3), "next", "warm")
	join(at(1, 3), "fill", "fill", "-fill", "1")
	if !publish { // a PUBLISHed track is not announced: nothing to discover
		join(at(1, 6), "next", "discover", "-discover")
	}
	join(at(2, 0), "fetch", "fetch", "-fetch", "0:0-1:9")
	// The relay fetches what it lacks from the publisher, which must
	// still be there to answer.
	readers[len(readers)-1].p.waitLine(t, ctx, "end ")
	// A whole group more for everyone, then the end.
	pub.nextLine(t, ctx, "the end of a group", at(0, objectsPerGroup-1))
	require.NoError(t, pub.stdin.Close())

	published := parsePublished(t, pub.wait(t, ctx))
	for _, rd := range readers {
		got := parseRead(t, rd.p.wait(t, ctx))
		if rd.draft != 0 {
			assert.Equal(t, fmt.Sprintf("moqt-%d", rd.draft), got.version, "%s: the draft it spoke", rd.p.name)
		}
		checkRead(t, rd.p.name, rd.kind, published, got)
	}
}

// loc is an object's Location.
type loc struct{ group, object uint64 }

func (l loc) less(o loc) bool {
	return l.group < o.group || l.group == o.group && l.object < o.object
}

// parsePublished reads the publisher's "pub G O" lines; it must have ended
// cleanly.
func parsePublished(t *testing.T, lines []string) []loc {
	t.Helper()
	var out []loc
	for _, l := range lines {
		var g, o uint64
		if _, err := fmt.Sscanf(l, "pub %d %d", &g, &o); err == nil {
			out = append(out, loc{g, o})
		}
	}
	require.Equal(t, "ended", lines[len(lines)-1], "the publisher's last line")
	return out
}

// readResult is what a subscriber printed.
type readResult struct {
	largest    *loc // from SUBSCRIBE_OK (FETCH_OK: its End)
	objects    []loc
	incomplete []string
	end        string
	lines      []string
	version    string // the negotiated draft, "moqt-21"
}

func parseRead(t *testing.T, lines []string) readResult {
	t.Helper()
	r := readResult{lines: lines}
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case f[0] == "ok" && len(f) == 3:
			g, _ := strconv.ParseUint(f[1], 10, 64)
			o, _ := strconv.ParseUint(f[2], 10, 64)
			r.largest = &loc{g, o}
		case f[0] == "obj":
			var g, s, o uint64
			var a, b uint64
			_, err := fmt.Sscanf(l, "obj %d %d %d object %d/%d", &g, &s, &o, &a, &b)
			require.NoError(t, err, "object line %q", l)
			require.Equal(t, [2]uint64{g, o}, [2]uint64{a, b}, "payload of %q", l)
			r.objects = append(r.objects, loc{g, o})
		case f[0] == "session" && len(f) == 2:
			r.version = f[1]
		case f[0] == "incomplete":
			r.incomplete = append(r.incomplete, l)
		case f[0] == "end" || f[0] == "error":
			r.end = l
		}
	}
	return r
}

// checkRead checks that a reader got exactly what it was promised, each
// object once, and the right end. An unfiltered subscription is promised
// what follows the Largest Object, and passes whatever else the relay
// receives later (§3.3.1): an object of an earlier group that a lossy path
// held back may come too, but nothing that was not published.
func checkRead(t *testing.T, name, kind string, published []loc, got readResult) {
	t.Helper()
	var want []loc
	allowed := map[loc]bool{}
	switch kind {
	case "fetch":
		for _, l := range published {
			if l.group <= 1 {
				want = append(want, l)
			}
		}
		assert.Equal(t, "end fetch", got.end, "%s: its end", name)
	case "unfiltered":
		for _, l := range published {
			allowed[l] = true
		}
		fallthrough
	case "next", "fill":
		require.NotNil(t, got.largest, "%s: SUBSCRIBE_OK reported no Largest Object: %v", name, got.lines)
		from := loc{got.largest.group, got.largest.object + 1}
		if kind == "fill" {
			from = loc{got.largest.group, 0} // the current group, from its start (§3.5)
		}
		for _, l := range published {
			if !l.less(from) {
				want = append(want, l)
			}
		}
		assert.Equal(t, "end TRACK_ENDED", got.end, "%s: its end", name)
	}
	seen := map[loc]int{}
	for _, l := range got.objects {
		seen[l]++
	}
	for l, n := range seen {
		assert.Equal(t, 1, n, "%s: object %v delivered %d times", name, l, n)
	}
	var missing, extra []loc
	wanted := map[loc]bool{}
	for _, l := range want {
		wanted[l] = true
		if seen[l] == 0 {
			missing = append(missing, l)
		}
	}
	for l := range seen {
		if !wanted[l] && !allowed[l] {
			extra = append(extra, l)
		}
	}
	assert.Empty(t, missing, "%s: objects missing (largest %v)", name, got.largest)
	assert.Empty(t, extra, "%s: objects outside what it was promised (largest %v)", name, got.largest)
	if t.Failed() {
		t.Logf("%s printed:\n%s", name, strings.Join(got.lines, "\n"))
	}
}

// TestPublisherKilled kills the publisher's process mid-track. The relay
// notices within the session's idle timeout plus a keep-alive period (8 s
// by default, 8-9 s measured on a quiet machine; the test allows for a
// loaded one) and tells every downstream subscriber with a code, unless a
// publisher came back under the same name meanwhile and took the track
// over:
//   - gone: nobody comes back; the subscribers get PUBLISH_DONE
//     INTERNAL_ERROR;
//   - in step: the new publisher goes on with the track's group numbers;
//     the subscribers keep getting objects, from it;
//   - anew: the new publisher numbers its groups from 0, behind what the
//     subscribers were promised; they are told the track ended, and a new
//     subscriber gets the new publisher's objects.
func TestPublisherKilled(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, next string // the first group of the killed publisher and of the one that comes back ("" for none)
	}{
		{"gone", "0", ""},
		{"in step", "0", "4"},
		{"anew", "100", "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			killPublisher(t, c.first, c.next)
		})
	}
}

func killPublisher(t *testing.T, first, next string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := startRelay(t, ctx)
	pubArgs := func(scheme, first string) []string {
		return []string{"-url", r.url(scheme), "-sha256", r.sha256, "-first", first, "-groups", "1000",
			"-objects", strconv.Itoa(objectsPerGroup), "-interval", interval}
	}
	sub := func(name, scheme string) *proc {
		return start(t, name, programs.sub, "-url", r.url(scheme), "-sha256", r.sha256, "-timeout", "60s")
	}
	firstGroup, _ := strconv.ParseUint(first, 10, 64)
	pub := start(t, "pub", programs.pub, pubArgs("moqt", first)...)
	pub.waitLine(t, ctx, "ready")
	pub.waitLine(t, ctx, fmt.Sprintf("pub %d 5", firstGroup))
	subs := []*proc{sub("quic", "moqt"), sub("webtransport", "https")}
	for _, s := range subs {
		s.waitLine(t, ctx, "obj ")
	}
	pub.waitLine(t, ctx, fmt.Sprintf("pub %d 0", firstGroup+2))
	require.NoError(t, pub.cmd.Process.Kill())
	killed := time.Now()
	<-pub.done

	var again *proc
	if next != "" {
		again = start(t, "pub again", programs.pub, pubArgs("https", next)...)
		again.waitLine(t, ctx, "ready")
	}
	if next == "4" { // in step: the new publisher's objects reach the old subscribers
		for _, s := range subs {
			s.waitLine(t, ctx, "obj 4 ")
			assert.Nil(t, s.exitErr(), "%s goes on", s.name)
		}
		return
	}
	for _, s := range subs {
		end := s.waitLine(t, ctx, "end ")
		took := time.Since(killed)
		t.Logf("%s: %q %v after the publisher was killed", s.name, end, took.Round(100*time.Millisecond))
		assert.Equal(t, "end INTERNAL_ERROR", end, "%s: the end of a publisher gone", s.name)
		// The default bound is 8 s (keep-alive plus idle timeout); a loaded
		// machine adds its delays, and the old defaults took 40 s.
		assert.Less(t, took, 20*time.Second, "%s: the dead publisher was noticed late", s.name)
		seen := map[loc]bool{}
		for _, l := range parseRead(t, s.wait(t, ctx)).objects {
			assert.False(t, seen[l], "%s: object %v twice", s.name, l)
			seen[l] = true
		}
	}
	if again != nil { // anew: a new subscriber gets the publisher that came back
		later := sub("later", "moqt")
		later.waitLine(t, ctx, "ok ")
		line := later.waitLine(t, ctx, "obj ")
		var g uint64
		_, err := fmt.Sscanf(line, "obj %d", &g)
		require.NoError(t, err)
		assert.Less(t, g, uint64(100), "an object of the publisher that came back: %q", line)
	}
}
