package moqt

import (
	"context"
	"sync"
)

// openRequests is the set of a session's open requests, both directions:
// what Shutdown drains (§6.6.1) and what the session's end unblocks. A
// request is open from its stream's first message until the stream is
// closed both ways.
type openRequests struct {
	// sess is the session's Context: once it is done, nothing is added,
	// so that every request added is in the snapshot taken after it.
	sess context.Context

	mu      sync.Mutex // guards the fields below; held for no call out
	active  map[*requestStream]struct{}
	idle    chan struct{} // closed and replaced when active becomes empty
	removed chan struct{} // closed and replaced at each removal
}

func newOpenRequests(sess context.Context) *openRequests {
	o := &openRequests{sess: sess, active: map[*requestStream]struct{}{}, idle: make(chan struct{}), removed: make(chan struct{})}
	close(o.idle)
	return o
}

// add registers an open request. It reports false once the session has
// ended.
func (o *openRequests) add(rs *requestStream) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sess.Err() != nil {
		return false
	}
	if len(o.active) == 0 {
		o.idle = make(chan struct{})
	}
	o.active[rs] = struct{}{}
	return true
}

// remove unregisters a request; removing one twice is harmless.
func (o *openRequests) remove(rs *requestStream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.active[rs]; !ok {
		return
	}
	delete(o.active, rs)
	if len(o.active) == 0 {
		close(o.idle)
	}
	close(o.removed)
	o.removed = make(chan struct{})
}

// waitFinished waits until the peer has finished, or reset, every request
// stream this end finished: it has read what this end sent on them. It
// fails when ctx or the session ends first.
func (o *openRequests) waitFinished(ctx context.Context) error {
	for {
		if o.sess.Err() != nil {
			// Its requests are torn down, not finished: that is no
			// confirmation.
			return context.Cause(o.sess)
		}
		o.mu.Lock()
		removed := o.removed
		waiting := false
		for rs := range o.active {
			if rs.finDone.Load() {
				waiting = true
				break
			}
		}
		o.mu.Unlock()
		if !waiting {
			return nil
		}
		select {
		case <-removed:
		case <-o.sess.Done():
			return context.Cause(o.sess)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unconfirmed counts the open requests whose end Session.Close waits for:
// those this end finished, or is ending (onClose), that the peer has not
// finished yet.
func (o *openRequests) unconfirmed() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for rs := range o.active {
		if rs.finDone.Load() || rs.onClose.Load() != nil {
			n++
		}
	}
	return n
}

// waitIdle waits until no request is open. It fails when ctx or the
// session ends first.
func (o *openRequests) waitIdle(ctx context.Context) error {
	for {
		o.mu.Lock()
		idle := o.idle
		n := len(o.active)
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-o.sess.Done():
			return context.Cause(o.sess)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshot returns the requests open now.
func (o *openRequests) snapshot() []*requestStream {
	o.mu.Lock()
	defer o.mu.Unlock()
	open := make([]*requestStream, 0, len(o.active))
	for rs := range o.active {
		open = append(open, rs)
	}
	return open
}
