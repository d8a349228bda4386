package kvstore_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// A watch of some of the partitions, loaded from the whole bucket (a large share of them) in
// both ways of loading, delivers exactly its partitions' records at their newest revisions (a
// record updated since its create comes once, at the update; a deleted one not at all), whole
// when loaded whole, and then only its partitions' live writes.
func TestJetStoreWatchShareOfPartitions(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	for _, headersOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("headers-only=%v", headersOnly), func(t *testing.T) {
			s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
			kvstore.SetWatchLoadForTest(s, headersOnly)
			ctx := testContext(t)
			p, q := 0, 2
			want := map[string]uint64{} // id → revision the watch must deliver
			for i := range 40 {
				task := newTask(fmt.Sprintf("t%d", i))
				task.Payload = bytes.Repeat([]byte{'x'}, 1500) // large enough for HdrRecord
				e := mustCreate(t, s, task)
				rev := e.Revision
				switch i % 3 {
				case 1:
					u := e.Task
					u.Attempt = 1
					rev = mustUpdate(t, s, &u, e.Revision)
				case 2:
					if err := s.Delete(ctx, task.ID, e.Revision); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if part := kvstore.Partition(task.ID, 4); part == p || part == q {
					want[task.ID] = rev
				}
			}
			w, err := s.Watch(ctx, p, q)
			if err != nil {
				t.Fatal(err)
			}
			defer stopWatch(t, w)
			got := map[string]uint64{}
			for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
				if ev.Kind != kvstore.EventPut {
					continue // a delete marker of the subset: the reader holds nothing
				}
				if _, dup := got[ev.ID]; dup {
					t.Errorf("%s delivered twice", ev.ID)
				}
				got[ev.ID] = ev.Revision
				if !headersOnly && (ev.Entry.Partial || len(ev.Entry.Task.Payload) != 1500) {
					t.Errorf("%s loaded whole: partial %v, %d payload bytes", ev.ID, ev.Entry.Partial, len(ev.Entry.Task.Payload))
				}
			}
			if len(want) < 4 || !reflect.DeepEqual(got, want) {
				t.Fatalf("initial records %v, want %v", got, want)
			}
			// Live: one write in another partition, then one in q; only q's comes.
			var other, mine string
			for i := 100; other == "" || mine == ""; i++ {
				id := fmt.Sprintf("t%d", i)
				switch kvstore.Partition(id, 4) {
				case 1, 3:
					other = id
				case q:
					mine = id
				}
			}
			mustCreate(t, s, newTask(other))
			e := mustCreate(t, s, newTask(mine))
			if ev := nextEvent(t, w); ev.Kind != kvstore.EventPut || ev.ID != mine || ev.Revision != e.Revision {
				t.Fatalf("live event %v %s rev %d, want the put of %s rev %d", ev.Kind, ev.ID, ev.Revision, mine, e.Revision)
			}
		})
	}
}
