package kvstore

import "context"

// PutRawForTest writes val under key without encoding, as a broken writer would.
func PutRawForTest(m *MemStore, key string, val []byte) uint64 { return m.putRaw(key, val) }

// MapErrorForTest is the error mapping of the JetStream boundary.
var MapErrorForTest = mapError

// LastRevisionForTest asks the stream leader for the last revision under a key filter.
func LastRevisionForTest(ctx context.Context, s *JetStore, filter string) (uint64, error) {
	return s.lastRevision(ctx, filter)
}
