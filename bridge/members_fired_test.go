package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// heldClaims is a task store whose claims (a write to RUNNING) of one task land at once but
// report their outcome only once release is closed, as a claim slow to complete would.
type heldClaims struct {
	*kvstore.JetStore
	id      string
	landed  chan struct{} // closed when the held claim has landed
	release chan struct{}
	once    sync.Once
}

func (h *heldClaims) UpdateAsync(ctx context.Context, t *kvstore.Task, rev uint64, done func(uint64, error)) {
	if t.ID != h.id || t.Status != kvstore.StatusRunning {
		h.JetStore.UpdateAsync(ctx, t, rev, done)
		return
	}
	h.JetStore.UpdateAsync(ctx, t, rev, func(r uint64, err error) {
		h.once.Do(func() { close(h.landed) })
		go func() {
			<-h.release
			done(r, err)
		}()
	})
}

// cached reports whether this replica's fired cache holds task id.
func (r *replica) cached(id string) bool {
	r.b.fired.mu.Lock()
	defer r.b.fired.mu.Unlock()
	_, ok := r.b.fired.m[id]
	return ok
}

// A claim that completes after its partition moved away fires (it won its CAS), and the attempt
// it caches for its ack is forgotten once the partition's acks no longer come here, even if no
// ack comes at all: the cache does not keep what no ack or watch event will remove.
func TestFiredCacheForgetsMovedPartitions(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, 60, time.Second)
	e.ack.Store(false) // the consumer never acks
	ids := e.idsIn("late", 1, func(p int) bool { return assign([]string{"ca", "cb"}, e.n)[p] == "cb" })
	h := &heldClaims{id: ids[0], landed: make(chan struct{}), release: make(chan struct{})}
	a := e.startWith("ca", natstest.Connect(t, e.srv.ClientURL()), nil, func(s *kvstore.JetStore) Store {
		h.JetStore = s
		return h
	})
	e.stable(a)
	e.create(ids, time.Now().UnixMilli())
	select {
	case <-h.landed:
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not claimed")
	}
	b := e.start("cb", nil)
	e.stable(a, b)
	close(h.release) // the claim completes now that the partition is cb's
	if !checkFor(10*time.Second, func() bool { return len(e.firesOf(ids)[ids[0]]) == 1 }) {
		t.Fatal("the claim that completed late did not fire")
	}
	if f := e.firesOf(ids)[ids[0]][0]; f.replica != "ca" {
		t.Fatalf("fired by %s, want ca", f.replica)
	}
	if !checkFor(10*time.Second, func() bool { return !a.cached(ids[0]) }) {
		t.Errorf("ca still caches the attempt of %s, whose partition moved to cb", ids[0])
	}
}
