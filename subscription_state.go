package moqt

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// subscriptionState is a subscription's place in the state machine of §3.1.
type subscriptionState int

// Subscription states (§3.1).
const (
	stateIdle              subscriptionState = iota
	statePendingSubscriber                   // SUBSCRIBE sent, no answer yet
	statePendingPublisher                    // PUBLISH sent, no answer yet
	stateEstablished                         // SUBSCRIBE_OK or PUBLISH_OK
	stateTerminated                          // REQUEST_ERROR, cancellation or PUBLISH_DONE
)

func (st subscriptionState) String() string {
	switch st {
	case stateIdle:
		return "Idle"
	case statePendingSubscriber:
		return "Pending(Subscriber)"
	case statePendingPublisher:
		return "Pending(Publisher)"
	case stateEstablished:
		return "Established"
	case stateTerminated:
		return "Terminated"
	}
	return fmt.Sprintf("SubscriptionState(%d)", int(st))
}

// canMove reports whether §3.1's diagram has an arrow from st to next.
// Established → Established is REQUEST_UPDATE.
func (st subscriptionState) canMove(next subscriptionState) bool {
	switch st {
	case stateIdle:
		return next == statePendingSubscriber || next == statePendingPublisher
	case statePendingSubscriber, statePendingPublisher:
		return next == stateEstablished || next == stateTerminated
	case stateEstablished:
		return next == stateEstablished || next == stateTerminated
	}
	return false
}

// subState is the state machine shared by both ends of a subscription. It
// closes established and done as the state passes them, records the error
// that terminated it, and refuses moves the diagram does not have. The
// state is also kept in an atomic, so that the data path reads it for each
// object without a lock.
type subState struct {
	mu    sync.Mutex
	state subscriptionState
	// initial is the state it was created in, and moved is state+1 once
	// it moved from there, 0 before: the lock-free copy State reads.
	initial     subscriptionState
	moved       atomic.Int32
	err         error // why it terminated
	established chan struct{}
	done        chan struct{}
	// onEnd runs once, outside mu, when the state moves to Terminated
	// (whenTerminated), before done is closed.
	onEnd func()
}

func newSubState(initial subscriptionState) subState {
	return subState{state: initial, initial: initial, established: make(chan struct{}), done: make(chan struct{})}
}

// move performs a transition, reporting an error for an illegal one.
func (s *subState) move(next subscriptionState, err error) error {
	s.mu.Lock()
	if !s.state.canMove(next) {
		defer s.mu.Unlock()
		return fmt.Errorf("subscription cannot move from %s to %s", s.state, next)
	}
	if s.state == next {
		s.mu.Unlock()
		return nil
	}
	s.state = next
	s.moved.Store(int32(next) + 1)
	var onEnd func()
	switch next {
	case stateEstablished:
		close(s.established)
	case stateTerminated:
		s.err = err
		onEnd, s.onEnd = s.onEnd, nil
	}
	s.mu.Unlock()
	if onEnd != nil {
		onEnd()
	}
	if next == stateTerminated {
		// After onEnd: whoever sees Done sees what the subscription held
		// released (a draft-18 track claim), and may subscribe again.
		close(s.done)
	}
	return nil
}

// whenTerminated makes f run once the state is Terminated: at once, here,
// if it is already.
func (s *subState) whenTerminated(f func()) {
	s.mu.Lock()
	if s.state != stateTerminated {
		s.onEnd = f
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// terminate moves to Terminated if not there yet; it reports whether it
// did.
func (s *subState) terminate(err error) bool {
	return s.move(stateTerminated, err) == nil
}

// current returns the current state.
func (s *subState) current() subscriptionState {
	if m := s.moved.Load(); m != 0 {
		return subscriptionState(m - 1)
	}
	return s.initial
}

// ended is closed when the subscription is Terminated.
func (s *subState) ended() <-chan struct{} { return s.done }

// termErr returns why the subscription terminated, or nil while it is live.
func (s *subState) termErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
