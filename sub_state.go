package moqt

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// SubscriptionState is a subscription's place in the state machine of §3.1.
type SubscriptionState int

// Subscription states (§3.1).
const (
	StateIdle              SubscriptionState = iota
	StatePendingSubscriber                   // SUBSCRIBE sent, no answer yet
	StatePendingPublisher                    // PUBLISH sent, no answer yet
	StateEstablished                         // SUBSCRIBE_OK or PUBLISH_OK
	StateTerminated                          // REQUEST_ERROR, cancellation or PUBLISH_DONE
)

func (st SubscriptionState) String() string {
	switch st {
	case StateIdle:
		return "Idle"
	case StatePendingSubscriber:
		return "Pending(Subscriber)"
	case StatePendingPublisher:
		return "Pending(Publisher)"
	case StateEstablished:
		return "Established"
	case StateTerminated:
		return "Terminated"
	}
	return fmt.Sprintf("SubscriptionState(%d)", int(st))
}

// canMove reports whether §3.1's diagram has an arrow from st to next.
// Established → Established is REQUEST_UPDATE.
func (st SubscriptionState) canMove(next SubscriptionState) bool {
	switch st {
	case StateIdle:
		return next == StatePendingSubscriber || next == StatePendingPublisher
	case StatePendingSubscriber, StatePendingPublisher:
		return next == StateEstablished || next == StateTerminated
	case StateEstablished:
		return next == StateEstablished || next == StateTerminated
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
	state SubscriptionState
	// initial is the state it was created in, and moved is state+1 once
	// it moved from there, 0 before: the lock-free copy State reads.
	initial     SubscriptionState
	moved       atomic.Int32
	err         error // why it terminated
	established chan struct{}
	done        chan struct{}
}

func newSubState(initial SubscriptionState) subState {
	return subState{state: initial, initial: initial, established: make(chan struct{}), done: make(chan struct{})}
}

// move performs a transition, reporting an error for an illegal one.
func (s *subState) move(next SubscriptionState, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.state.canMove(next) {
		return fmt.Errorf("subscription cannot move from %s to %s", s.state, next)
	}
	if s.state == next {
		return nil
	}
	s.state = next
	s.moved.Store(int32(next) + 1)
	switch next {
	case StateEstablished:
		close(s.established)
	case StateTerminated:
		s.err = err
		close(s.done)
	}
	return nil
}

// terminate moves to Terminated if not there yet; it reports whether it
// did.
func (s *subState) terminate(err error) bool {
	return s.move(StateTerminated, err) == nil
}

// State returns the current state.
func (s *subState) State() SubscriptionState {
	if m := s.moved.Load(); m != 0 {
		return SubscriptionState(m - 1)
	}
	return s.initial
}

// Done is closed when the subscription is Terminated.
func (s *subState) Done() <-chan struct{} { return s.done }

// Err returns why the subscription terminated, or nil while it is live.
func (s *subState) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
