package kvstore

// PutRawForTest writes val under key without encoding, as a broken writer would.
func PutRawForTest(m *MemStore, key string, val []byte) uint64 { return m.putRaw(key, val) }

// MapErrorForTest is the error mapping of the JetStream boundary.
var MapErrorForTest = mapError
