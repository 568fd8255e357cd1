package sendq

import (
	"context"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// now is the clock of the Writers under test: in a synctest bubble, the
// bubble's.
func now() int64 { return time.Now().UnixNano() }

// fakeStream takes as many bytes as it was granted credit for, and blocks
// a Write for the rest until its deadline.
type fakeStream struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	got      []byte
	credit   int
	deadline time.Time
	change   chan struct{} // closed on a change of credit or deadline
	writes   int
	marked   []int // bytes each WriteMarked took
}

func newFakeStream(credit int) *fakeStream {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &fakeStream{ctx: ctx, cancel: cancel, credit: credit, change: make(chan struct{})}
}

// changed wakes a blocked Write. s.mu is held.
func (s *fakeStream) changed() {
	close(s.change)
	s.change = make(chan struct{})
}

func (s *fakeStream) Write(b []byte) (int, error) {
	n := 0
	for {
		s.mu.Lock()
		if n == 0 {
			s.writes++
		}
		k := min(s.credit, len(b)-n)
		s.got = append(s.got, b[n:n+k]...)
		s.credit -= k
		n += k
		dl, change := s.deadline, s.change
		s.mu.Unlock()
		if n == len(b) {
			return n, nil
		}
		if err := context.Cause(s.ctx); err != nil {
			return n, err
		}
		var expired <-chan time.Time
		if !dl.IsZero() {
			if !time.Now().Before(dl) {
				return n, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-change:
		case <-expired:
		case <-s.ctx.Done():
		}
	}
}

// WriteMarked is Write, recording what each call took.
func (s *fakeStream) WriteMarked(b []byte) (int, error) {
	n, err := s.Write(b)
	s.mu.Lock()
	s.marked = append(s.marked, n)
	s.mu.Unlock()
	return n, err
}

func (s *fakeStream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	s.changed()
	return nil
}

func (s *fakeStream) Context() context.Context { return s.ctx }

// grant lets the stream take n more bytes.
func (s *fakeStream) grant(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.credit += n
	s.changed()
}

func (s *fakeStream) markedWrites() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.marked)
}

func (s *fakeStream) taken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.got)
}

// fakeOwner records what a Queue tells it.
type fakeOwner struct {
	mu       sync.Mutex
	armed    []int64 // ArmObject's deadlines; 0 for DisarmObject
	end      uint64
	deadline int64
	grace    int // GraceExpired calls
	ready    chan struct{}
	failed   []error
	// q, when set, is the owner's queue: Failed records whether it was
	// broken already (brokenAtFailed).
	q              *Queue
	brokenAtFailed []bool
	finished       []string
	drained        int
}

func (o *fakeOwner) Late() bool { return false }

func (o *fakeOwner) CurrentObject() (uint64, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.end, o.deadline
}

func (o *fakeOwner) ArmObject(d int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed = append(o.armed, d)
}

func (o *fakeOwner) DisarmObject() { o.ArmObject(0) }

func (o *fakeOwner) GraceExpired() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.grace++
}

func (o *fakeOwner) Ready() error {
	if o.ready != nil {
		<-o.ready
	}
	return nil
}

func (o *fakeOwner) Failed(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, err)
	if o.q != nil {
		o.brokenAtFailed = append(o.brokenAtFailed, o.q.Broken())
	}
}

func (o *fakeOwner) Finish(reset bool, code wire.ResetCode) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reset {
		o.finished = append(o.finished, "reset "+code.String())
		return
	}
	o.finished = append(o.finished, "fin")
}

func (o *fakeOwner) Drained() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.drained++
}

// snapshot returns copies of what o was told.
func (o *fakeOwner) snapshot() (armed []int64, failed []error, finished []string, drained int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.armed...), append([]error(nil), o.failed...), append([]string(nil), o.finished...), o.drained
}

// rig is a Writer with streams, each of its own subscriber (Group), in one
// Session.
type rig struct {
	w      Writer
	sess   Session
	gs     []*Group
	qs     []*Queue
	strs   []*fakeStream
	owners []*fakeOwner
}

// newRig returns a Writer with a stream for each credit, each in a group
// of limit bytes and grace.
func newRig(limit int, grace time.Duration, credits ...int) *rig {
	r := &rig{}
	r.w.Init(now)
	r.sess.Init(1<<30, nil)
	for _, c := range credits {
		s, o, q, g := newFakeStream(c), &fakeOwner{}, &Queue{}, &Group{}
		g.Init(limit, grace, &r.sess)
		q.Init(s, o, g, &r.w)
		r.qs, r.strs, r.owners, r.gs = append(r.qs, q), append(r.strs, s), append(r.owners, o), append(r.gs, g)
	}
	return r
}

// send sends b to every stream, as one object, within grace.
func (r *rig) send(b string, grace time.Duration) []error {
	until := now() + int64(grace)
	errs := make([]error, len(r.qs))
	for i, q := range r.qs {
		errs[i] = r.w.Send(q, []byte(b), nil, false, len(r.qs) > 1, until)
	}
	return errs
}
