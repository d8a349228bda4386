package kvstore

import "context"

// PinSendModeForTest fixes how an automatically grouping store sends its async writes: in
// batches, or each on its own; the policy is no longer consulted. It panics if s does not group
// automatically.
func PinSendModeForTest(s *JetStore, batches bool) {
	if !s.group.auto {
		panic("PinSendModeForTest: the store does not group automatically")
	}
	m := sendSingles
	if batches {
		m = sendBatches
	}
	s.group.pin(m)
}

// WaitSentForTest waits until s's grouper has sent every async write made before.
func WaitSentForTest(ctx context.Context, s *JetStore) error { return s.afterGrouped(ctx) }
