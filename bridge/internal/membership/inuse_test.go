package membership

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A second process with a running member's id fails Start, and leaves the first one's key alone.
func TestSecondProcessWithOneIDFailsStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a := join(t, s, "a", nil)
		synctest.Wait()
		m, err := New(Config{ReplicaID: "a", Partitions: parts, Lease: lease, Store: s.of("a2")})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Start(context.Background())
		t.Logf("second Start: %v", err)
		if !errors.Is(err, ErrReplicaInUse) {
			t.Errorf("a second process with id a: Start %v, want ErrReplicaInUse", err)
		}
		_ = m.Stop(context.Background())
		synctest.Wait()
		if !s.has("m.a") {
			t.Error("the second process deleted the first one's key")
		}
		after(lease)
		if n := len(a.owned()); n != parts {
			t.Errorf("the first process owns %d partitions, want all %d", n, parts)
		}
	})
}

// A running member that sees its key written by another process owns nothing from then on, does
// not delete the key as it stops, and Stop reports why; the others take its partitions.
func TestForeignWriteOfOwnKeyFences(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		a, b := join(t, s, "a", nil), join(t, s, "b", nil)
		synctest.Wait()
		s.write("m.a", "0123456789abcdef 1", lease)
		synctest.Wait()
		if n := len(a.owned()); n != 0 {
			t.Errorf("after another process wrote its key, a owns %d partitions", n)
		}
		after(2 * lease)
		if len(a.owned()) != 0 || len(b.owned()) != parts {
			t.Errorf("two leases later a owns %d partitions and b %d", len(a.owned()), len(b.owned()))
		}
		s.write("m.a", "0123456789abcdef 2", lease)
		err := a.m.Stop(context.Background())
		t.Logf("Stop: %v", err)
		if !errors.Is(err, ErrReplicaInUse) {
			t.Errorf("Stop %v, want ErrReplicaInUse", err)
		}
		if !s.has("m.a") {
			t.Error("a deleted the other process's key as it stopped")
		}
	})
}

// A member started while its key is still there from a process of its id that ended without a
// leave (a crash) starts once half a lease passed without another write of the key, before the
// key expires (a restart after kill -9 must not wait out the lease), and owns its share.
func TestStartAfterCrashWaitsForOldKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		s.write("m.a", "0123456789abcdef 7", lease)
		start := time.Now()
		a := join(t, s, "a", nil)
		if d := time.Since(start); d > lease*3/4 {
			t.Errorf("the restart joined %v after its start, want within half a lease (%v) and before the old key's expiry", d, lease/2)
		}
		if n := len(a.owned()); n != parts {
			t.Errorf("a owns %d partitions, want all %d", n, parts)
		}
	})
}

// A restart whose old key was last written over staleAfter ago (its writer missed a heartbeat)
// joins at once, though the key has not expired yet.
func TestStartAfterCrashWithStaleKeyJoinsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		s.write("m.a", "0123456789abcdef 7", lease)
		after(lease / 2)
		start := time.Now()
		a := join(t, s, "a", nil)
		if d := time.Since(start); d > lease/10 {
			t.Errorf("the restart joined %v after its start; its old key was %v old, want at once", d, lease/2)
		}
		if n := len(a.owned()); n != parts {
			t.Errorf("a owns %d partitions, want all %d", n, parts)
		}
	})
}
