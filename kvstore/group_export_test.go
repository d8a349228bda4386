package kvstore

import "context"

// WaitSentForTest waits until s's grouper has sent every async write made before.
func WaitSentForTest(ctx context.Context, s *JetStore) error { return s.afterGrouped(ctx) }

// holdSends is a send in flight that never ends by itself: it takes up all the room.
const holdSends = 1 << 30

// HoldSendsForTest makes s's grouper act as if sends filled its room in flight, so that the async
// writes made from now on wait, as writes do behind a slow answer; release lets them out, as that
// answer would: together, in batches of up to BatchMax. It panics if s does not group its writes.
func HoldSendsForTest(s *JetStore) (release func()) {
	g := s.group
	g.flying.Add(holdSends)
	return func() {
		g.flying.Add(-holdSends)
		g.poke()
	}
}

// SetCommitInFlightForTest sets how many sends a grouper keeps unanswered (benchmarks), and
// returns a function that restores it.
func SetCommitInFlightForTest(n int64) (restore func()) {
	old := commitInFlight
	commitInFlight = n
	return func() { commitInFlight = old }
}
