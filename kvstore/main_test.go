package kvstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No ignores: every test stops its watchers, closes its stores and connections, and shuts down its
// in-process servers (waiting for them), so no nats-server or nats.go goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
