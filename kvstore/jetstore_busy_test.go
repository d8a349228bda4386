package kvstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// On a replicated bucket the stream leader refuses a CAS write with code 10164, without comparing
// revisions, while another write to the same key is proposed but not yet applied on the leader. A
// follower may have applied that write already and shown it to a watch (or a direct get), so a
// write at the revision it created can reach the leader in that window. It is not a conflict: the
// record is at that revision. Each write below goes out right behind the create of its key, at the
// revision the create gets, before the create's answer; each must land. (Issue 14 item 8: claims
// refused this way were taken for conflicts and left their tasks WAITING for good.)
func TestJetStoreR3WriteRightBehindCreate(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	js := newJS(t, c.ClientURLs())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Replicas: 3})
	ctx := testContext(t)
	stream, err := js.Stream(ctx, "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	claimed := func(id string) *kvstore.Task {
		task := newTask(id)
		task.Status, task.Attempt, task.Owner = kvstore.StatusRunning, 1, "r1"
		return task
	}
	writes := []struct {
		name  string
		write func(id string, rev uint64) error
	}{
		{"Update", func(id string, rev uint64) error { _, err := s.Update(ctx, claimed(id), rev); return err }},
		{"UpdateAsync", func(id string, rev uint64) error { _, err := updateAsync(ctx, s, claimed(id), rev); return err }},
		{"Delete", func(id string, rev uint64) error { return s.Delete(ctx, id, rev) }},
		{"DeleteAsync", func(id string, rev uint64) error { return deleteAsync(ctx, s, id, rev) }},
	}
	type created struct {
		e   kvstore.Entry
		err error
	}
	for i := range 10 * len(writes) {
		w := writes[i%len(writes)]
		id := fmt.Sprintf("busy-%d", i)
		next := lastSeq() + 1 // nothing else writes to the bucket: the create gets this revision
		ch := make(chan created, 1)
		s.CreateAsync(ctx, newTask(id), func(e kvstore.Entry, err error) { ch <- created{e, err} })
		err := w.write(id, next) // on the connection right behind the create
		cr, cerr := awaitResult(ch, func(c created) (kvstore.Entry, error) { return c.e, c.err })
		if cerr != nil || cr.Revision != next {
			t.Fatalf("create %s: revision %d, %v; want revision %d", id, cr.Revision, cerr, next)
		}
		if err != nil {
			t.Errorf("%s of %s at revision %d, right behind its create: %v", w.name, id, next, err)
		}
	}
}

// Asking again on a busy key must not hide a real conflict: of two claims at one revision sent
// back to back (the second reaches the leader while the first is in process), exactly one lands
// and the other is ErrConflict; a write at a stale revision is ErrConflict at once.
func TestJetStoreR3BusyKeyStillConflicts(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	s := openJetStore(t, newJS(t, c.ClientURLs()), kvstore.Config{Bucket: newBucketName(), Replicas: 3})
	ctx := testContext(t)
	for i := range 10 {
		id := fmt.Sprintf("race-%d", i)
		e := mustCreate(t, s, newTask(id))
		type res struct {
			rev uint64
			err error
		}
		ch := make(chan res, 2)
		for _, owner := range []string{"r1", "r2"} {
			task := newTask(id)
			task.Status, task.Attempt, task.Owner = kvstore.StatusRunning, 1, owner
			s.UpdateAsync(ctx, task, e.Revision, func(rev uint64, err error) { ch <- res{rev, err} })
		}
		var won, lost int
		for range 2 {
			r, err := awaitResult(ch, func(r res) (res, error) { return r, r.err })
			switch {
			case err == nil && r.rev > e.Revision:
				won++
			case errors.Is(err, kvstore.ErrConflict):
				lost++
			default:
				t.Errorf("claim of %s at revision %d: revision %d, %v", id, e.Revision, r.rev, err)
			}
		}
		if won != 1 || lost != 1 {
			t.Errorf("claims of %s at revision %d: %d landed, %d conflicts; want one each", id, e.Revision, won, lost)
		}
		if _, err := s.Update(ctx, newTask(id), e.Revision); !errors.Is(err, kvstore.ErrConflict) {
			t.Errorf("update of %s at stale revision %d: %v, want ErrConflict", id, e.Revision, err)
		}
	}
}
