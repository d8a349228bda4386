package kvstore

import (
	"context"
	"time"
)

// PutRawForTest writes val under key without encoding, as a broken writer would.
func PutRawForTest(m *MemStore, key string, val []byte) uint64 { return m.putRaw(key, val) }

// MapErrorForTest is the error mapping of the JetStream boundary.
var MapErrorForTest = mapError

// LastRevisionForTest asks the stream leader for the last revision under a key filter.
func LastRevisionForTest(ctx context.Context, s *JetStore, filter string) (uint64, error) {
	return s.lastRevision(ctx, filter)
}

// LastMsgForTest describes the last message under the key of id: whether there is one, whether it
// is a delete marker, and the TTL it carries (0: none).
func LastMsgForTest(m *MemStore, id string) (present, marker bool, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	r, ok := m.recs[Key(id, m.n)]
	return ok, r.deleted, r.ttl
}

// WatchHighWaterForTest is the most events w's queue has held.
func WatchHighWaterForTest(w Watcher) int {
	if jw, ok := w.(*jetWatcher); ok {
		return jw.highWater()
	}
	return w.(*watcher).highWater()
}

// SetWatchTargetHookForTest makes f run in every Watch of s between reading the leader's last
// revision and creating the consumer.
func SetWatchTargetHookForTest(s *JetStore, f func()) { s.testHookTarget = f }

// SetBatchSendHookForTest makes f run in s before each batch's messages are sent. It panics if s
// does not group its writes.
func SetBatchSendHookForTest(s *JetStore, f func(subjects []string)) { s.group.testHookSend = f }

// DecodeWatchedForTest decodes vals, the records of ids at revisions 1, 2, ..., in order as one
// watch does (one decoder that keeps what repeats).
func DecodeWatchedForTest(ids []string, vals [][]byte) ([]Entry, []error) {
	var rd recordDecoder
	es, errs := make([]Entry, len(vals)), make([]error, len(vals))
	for i, v := range vals {
		es[i], errs[i] = rd.entry(ids[i], uint64(i+1), v)
	}
	return es, errs
}

// DecodeEntryForTest is decodeEntry: a stored value decoded for a store, the payload not copied.
var DecodeEntryForTest = decodeEntry

// NewWatchDecoderForTest returns the decoding of one watch: decodeEntry's, keeping what repeats.
func NewWatchDecoderForTest() func(id string, rev uint64, val []byte) (Entry, error) {
	return new(recordDecoder).entry
}

// SetWatchLoadForTest makes s's watches load their initial values headers-only (or whole),
// whatever the size of the bucket's messages.
func SetWatchLoadForTest(s *JetStore, headersOnly bool) {
	s.testLoad = -1
	if headersOnly {
		s.testLoad = 1
	}
}

// AsyncPendingForTest is how many of s's async writes nats.go still awaits an answer for.
func AsyncPendingForTest(s *JetStore) int { return s.pub.PublishAsyncPending() }
