package kvstore_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// payloadOf is a 4 KiB payload that differs from task to task.
func payloadOf(id string) []byte {
	return bytes.Repeat([]byte(id+";"), 4096/(len(id)+1)+1)[:4096]
}

// A new watch of a bucket of large records loads its initial values headers-only: each is a
// Partial entry whose state (status, due time, attempt, claim, owner, lease, caller headers, ...)
// is the record's, and the connection receives far fewer bytes than the payloads. Live events
// after EventInitDone are whole records.
func TestJetStoreWatchInitialValuesHeadersOnly(t *testing.T) {
	t.Parallel()
	const n = 300
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	ctx := testContext(t)
	for i := range n {
		task := newTask(fmt.Sprintf("h-%d", i))
		task.Payload = payloadOf(task.ID)
		task.Header = map[string][]string{"X-Trace": {task.ID}, "Bin": {"\xff\x00"}}
		e := mustCreate(t, s, task)
		if i%3 == 0 { // a RUNNING record with a claim, an owner and a lease
			claimed, err := kvstore.Claim(e.Task, task.DueAt, "bridge-a", e.Revision)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, &claimed, e.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The reader has a connection of its own, so that its received bytes are the watch's.
	rjs := newJS(t, srv.ClientURL())
	r := openJetStore(t, rjs, kvstore.Config{Bucket: s.Bucket()})
	before := rjs.Conn().Stats().InBytes
	w, err := r.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	seen := map[string]bool{}
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		if ev.Kind != kvstore.EventPut || !ev.Entry.Partial || ev.Entry.Task.Payload != nil {
			t.Fatalf("initial event %+v: want a partial entry without payload", ev)
		}
		want := mustGet(t, s, ev.ID)
		if len(want.Task.Payload) != 4096 {
			t.Fatalf("%s: Get payload of %d bytes", ev.ID, len(want.Task.Payload))
		}
		want.Task.Payload, want.Partial = nil, true
		if !reflect.DeepEqual(ev.Entry, want) {
			t.Fatalf("initial value %+v, want the record's state %+v", ev.Entry, want)
		}
		seen[ev.ID] = true
	}
	loaded := rjs.Conn().Stats().InBytes - before
	if len(seen) != n {
		t.Fatalf("initial values of %d tasks, want %d", len(seen), n)
	}
	if payloads := uint64(n * 4096); loaded > payloads/3 {
		t.Errorf("the load received %d bytes for %d bytes of payloads: payloads were sent", loaded, payloads)
	}
	t.Logf("initial values of %d records with 4 KiB payloads: %d bytes received", n, loaded)

	// Live: an update and a create arrive whole.
	cur := mustGet(t, s, "h-1")
	cur.Task.Payload = []byte("new payload")
	rev, err := s.Update(ctx, &cur.Task, cur.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if e := expectEvent(t, w, kvstore.EventPut, "h-1", rev); e.Entry.Partial || string(e.Entry.Task.Payload) != "new payload" {
		t.Fatalf("live update %+v: want the whole record", e.Entry)
	}
	task := newTask("h-new")
	task.Payload = payloadOf(task.ID)
	c := mustCreate(t, s, task)
	if e := expectEvent(t, w, kvstore.EventPut, "h-new", c.Revision); !reflect.DeepEqual(e.Entry, c) {
		t.Fatalf("live create %+v, want %+v", e.Entry, c)
	}
}

// Writes made while a watch starts and loads (before its consumer exists, during the initial
// values and across the switch to the live watch) are each seen exactly once, in the load or
// live, and no key's revision goes backwards.
func TestJetStoreWatchWritesDuringStart(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	kvstore.SetWatchLoadForTest(s, true) // small records, loaded headers-only all the same
	ctx := testContext(t)
	createMany(t, s, "old", 2000)

	var mu sync.Mutex
	written := map[string]uint64{} // id → revision of every create below
	write := func(id string) {
		e, err := s.Create(ctx, newTask(id))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		written[id] = e.Revision
		mu.Unlock()
	}
	kvstore.SetWatchTargetHookForTest(s, func() {
		for i := range 20 { // after the leader's last revision was read, before the consumer
			write(fmt.Sprintf("hook-%d", i))
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a writer all along the load and past it
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			write(fmt.Sprintf("live-%d", i))
		}
	}()
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	got := map[string]uint64{}
	record := func(ev kvstore.Event) {
		if ev.Kind != kvstore.EventPut {
			t.Fatalf("event %+v", ev)
		}
		if prev, ok := got[ev.ID]; ok {
			t.Fatalf("%s: revision %d after %d: delivered twice or backwards", ev.ID, ev.Revision, prev)
		}
		got[ev.ID] = ev.Revision
	}
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		record(ev)
	}
	// Some more live writes after the switch, then stop the writer and take what is left.
	for range 200 {
		record(nextEvent(t, w))
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for len(got) < 2000+len(written) {
		record(nextEvent(t, w))
	}
	for id, rev := range written {
		if got[id] != rev {
			t.Errorf("%s: written at revision %d, watch delivered %d", id, rev, got[id])
		}
	}
}

// Records written without the Ax-Record header (by builds before it, as e2b1414's were) still
// load whole: more than one batched read's worth of them, mixed with records that have it.
func TestJetStoreWatchLoadsRecordsWithoutHeaderWhole(t *testing.T) {
	t.Parallel()
	const n = 600
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	ctx := testContext(t)
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		task := newTask(fmt.Sprintf("old-%d", i))
		task.Payload = payloadOf(task.ID)
		val, err := kvstore.EncodeTask(task)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, kvstore.Key(task.ID, 4), val); err != nil { // no header
			t.Fatal(err)
		}
		if i%10 == 0 {
			nt := newTask(fmt.Sprintf("new-%d", i))
			nt.Payload = payloadOf(nt.ID) // large enough to carry the header
			mustCreate(t, s, nt)
		}
	}
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	old := 0
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		want := mustGet(t, s, ev.ID)
		switch {
		case ev.Kind != kvstore.EventPut:
			t.Fatalf("event %+v", ev)
		case ev.Entry.Partial: // a record with the header
			want.Task.Payload, want.Partial = nil, true
		default:
			old++
		}
		if !reflect.DeepEqual(ev.Entry, want) {
			t.Fatalf("initial value %+v, want %+v", ev.Entry, want)
		}
	}
	if old != n {
		t.Fatalf("%d records without the header loaded whole, want %d", old, n)
	}
}

// A bucket of small records is loaded whole: there the header would cost more than the payloads
// it saves (headersOnlyMin).
func TestJetStoreWatchLoadsSmallRecordsWhole(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	createMany(t, s, "small", 50)
	w, err := s.Watch(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		if want := mustGet(t, s, ev.ID); ev.Entry.Partial || !reflect.DeepEqual(ev.Entry, want) {
			t.Fatalf("initial value %+v, want the whole record %+v", ev.Entry, want)
		}
	}
}

// Only records of at least 1 KiB carry the Ax-Record header: for a smaller one the second copy of
// its metadata would cost more server memory than a headers-only load could save, and such a load
// reads it whole anyway. Nor does a record whose metadata line is too long for a header.
func TestJetStoreRecordHeaderOnLargeRecordsOnly(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName(), Partitions: 4})
	ctx := testContext(t)
	small, large, blob := newTask("small"), newTask("large"), newTask("blob")
	large.Payload = payloadOf(large.ID)
	// Caller headers whose JSON form is over 64 KiB (each control byte is written as \u0001):
	// as a header copy JetStream would refuse the record.
	blob.Payload = payloadOf(blob.ID)
	blob.Header = map[string][]string{"X-Blob": {strings.Repeat("\x01", 11000)}}
	mustCreate(t, s, small)
	mustCreate(t, s, blob)
	e := mustCreate(t, s, large)
	large.Status = kvstore.StatusRunning // an update carries it too
	if _, err := s.Update(ctx, large, e.Revision); err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"small": false, "large": true, "blob": false} {
		m, err := str.GetLastMsgForSubject(ctx, "$KV."+s.Bucket()+"."+kvstore.Key(id, s.Partitions()))
		if err != nil {
			t.Fatal(err)
		}
		h := m.Header.Get(kvstore.HdrRecord)
		if line, _, _ := bytes.Cut(m.Data, []byte("\n")); (h != "") != want || (want && h != string(line)) {
			t.Errorf("%s: header %q, want present %v and equal to the metadata line %q", id, h, want, line)
		}
	}
}
