package retry

import "time"

// The pacings of every retry in the bridge and its store, innermost first. A stuck task write
// goes through them in this order: Busy and NoLeader inside one store call (bounded by the call's
// deadline), then Step at the task's next step; a watch that ends restarts at Rewatch's pace.
var (
	// Busy: a write the bucket's leader refused because the key is busy (10164 on a replicated
	// bucket: another write of the key is proposed, nothing was stored), until the call's deadline.
	Busy = Policy{First: 2 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.5}
	// CreateBusy: a create refused for a record that then reads as absent (the same 10164 race).
	CreateBusy = Policy{First: 2 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: 0.5, Tries: 10}
	// NoLeader: a write that found no stream to take it (no responders: safe to send again), at
	// a constant pace until the call's deadline (nats.go's own retry, with this wait).
	NoLeader = Policy{First: 50 * time.Millisecond}
	// Step: a task's step (claim, lease, give-back) after its store call failed or its outcome was
	// unknown; the next try of an unknown outcome reads the record back first.
	Step = Policy{First: time.Second, Jitter: 0.2}
	// ReadBehind: a step whose read returned an older revision than the one it was queued for
	// (a follower behind its leader), up to Step's wait; then the step is reported behind, for
	// the reconciler. No jitter: the scheduling core is deterministic.
	ReadBehind = Policy{First: 20 * time.Millisecond, Max: time.Second, Tries: 13}
	// Held: a fire that came due while the connection to NATS was down, until it is back.
	Held = Policy{First: 20 * time.Millisecond}
	// Ack: a consumer's ack read back and written again after a store error or a second conflict,
	// until it is applied or found stale.
	Ack = Policy{First: 10 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}
	// Rewatch: starting a task or members watch again after it ended or failed to start.
	Rewatch = Policy{First: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}
	// Intake: setting the intake stream and consumer up again after the consumer stopped.
	Intake = Policy{First: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
)

// Within is how many tries of a constant-paced p fit in d: a deadline turned into Tries.
func (p Policy) Within(d time.Duration) int {
	if p.First <= 0 {
		return 0
	}
	return max(int(d/p.First), 0)
}
