package kvstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// testdata/e2b1414 holds records exactly as e2b1414's EncodeTask wrote them (generated with that
// commit's kvstore): version 1 without claim, src and hdr_b64. This test puts them into a bucket
// created as e2b1414 created it, opens it with this build, and shows how each is read and what the
// bridge can do with it next (subjects.md, "Records written by e2b1414").
func TestCodecE2B1414Bucket(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := testContext(t)
	kv, bucket := e2b1414Bucket(t, js)
	files, err := filepath.Glob(filepath.Join("testdata", "e2b1414", "*.rec"))
	if err != nil || len(files) != 6 {
		t.Fatalf("testdata/e2b1414: %d records, %v", len(files), err)
	}
	for _, f := range files {
		val, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSuffix(filepath.Base(f), ".rec")
		if _, err := kv.Create(ctx, kvstore.Key(id, 16), val); err != nil {
			t.Fatal(err)
		}
	}
	s := openJetStore(t, js, kvstore.Config{Bucket: bucket})

	// The watch (the bridge's index load) reads every one of them.
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	got := map[string]kvstore.Entry{}
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		if ev.Kind != kvstore.EventPut {
			t.Fatalf("event %+v: every e2b1414 record must decode", ev)
		}
		got[ev.ID] = ev.Entry
	}
	if len(got) != len(files) {
		t.Fatalf("watch delivered %d records, want %d", len(got), len(files))
	}
	for id, e := range got {
		if e.Task.Claim != 0 || e.Task.Fingerprint != "" {
			t.Errorf("%s: claim %d, src %q; e2b1414 wrote neither", id, e.Task.Claim, e.Task.Fingerprint)
		}
		if g := mustGet(t, s, id); !reflect.DeepEqual(g, e) {
			t.Errorf("%s: Get %+v, watch %+v", id, g, e)
		}
	}

	// WAITING: claimed as any record is; the claim adds the fencing token.
	waiting := got["e2b-waiting"]
	wantHdr := map[string][]string{"Trace-Id": {"t-1"}, "X-Tag": {"a", "b"}}
	if !reflect.DeepEqual(waiting.Task.Header, wantHdr) || string(waiting.Task.Payload) != `{"order_id":42}` {
		t.Fatalf("e2b-waiting: header %q payload %q", waiting.Task.Header, waiting.Task.Payload)
	}
	const now = 1764550800000 + 5_000 // after every due time in the testdata
	claimed, err := kvstore.Claim(waiting.Task, now, "bridge-b", waiting.Revision)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.Update(ctx, &claimed, waiting.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if back := mustGet(t, s, "e2b-waiting"); back.Revision != rev || back.Task.Claim != waiting.Revision {
		t.Fatalf("claimed e2b-waiting reads back as %+v, want claim %d at revision %d", back, waiting.Revision, rev)
	}

	// RUNNING without a claim: its attempt was fired with e2b1414's ack subject
	// (ax.ack.<replica>.<attempt>.<taskId>), which this build does not apply, and no token admits
	// an ack for it; its lease runs out and the attempt counts as failed, as if the consumer never
	// answered: retried after the backoff (or DEAD once the attempts are used up).
	running := got["e2b-running"].Task
	if running.Status != kvstore.StatusRunning || running.Attempt != 2 || running.Owner != "bridge-a" {
		t.Fatalf("e2b-running: %+v", running)
	}
	if want := "nak: \"db down\"\x7f\u2028\x01 é"; running.LastError != want {
		t.Errorf("e2b-running: last error %q, want %q (e2b1414's \\u escapes)", running.LastError, want)
	}
	for _, token := range []uint64{0, 2, got["e2b-running"].Revision} {
		if _, err := kvstore.Ack(running, token, now); !errors.Is(err, kvstore.ErrStaleAttempt) {
			t.Errorf("ack of e2b-running with token %d: %v, want ErrStaleAttempt", token, err)
		}
	}
	if _, err := kvstore.LeaseExpired(running, running.LeaseUntil-1); !errors.Is(err, kvstore.ErrTransition) {
		t.Errorf("lease expiry before the lease ends: %v, want ErrTransition", err)
	}
	retried, err := kvstore.LeaseExpired(running, running.LeaseUntil)
	if err != nil {
		t.Fatal(err)
	}
	if retried.Status != kvstore.StatusWaiting || retried.Attempt != 2 ||
		retried.DueAt != running.LeaseUntil+(30*time.Second).Milliseconds() || retried.LastError != "ack wait expired" {
		t.Fatalf("e2b-running after its lease: %+v", retried)
	}
	if _, err := s.Update(ctx, &retried, got["e2b-running"].Revision); err != nil {
		t.Fatal(err)
	}

	// Headers that were not UTF-8: e2b1414 had already replaced the bad bytes with U+FFFD when it
	// wrote the record; that is what comes back (and fires). The payload is intact.
	bin := got["e2b-binary-header"].Task
	if !reflect.DeepEqual(bin.Header, map[string][]string{"Raw": {"a\uFFFDb"}}) || string(bin.Payload) != "\x00\x01\n\xff" {
		t.Errorf("e2b-binary-header: header %q payload %q", bin.Header, bin.Payload)
	}

	// Finished records read as finished. e2b1414 wrote them without Nats-TTL (its bridge deleted
	// them when their retention ended); this build neither deletes them nor adds a TTL, so they stay
	// until an operator removes them (subjects.md).
	for id, status := range map[string]kvstore.Status{
		"e2b-success": kvstore.StatusSuccess, "e2b-dead": kvstore.StatusDead, "e2b-cancelled": kvstore.StatusCancelled,
	} {
		e := got[id]
		if e.Task.Status != status || e.Task.FinishedAt == 0 {
			t.Errorf("%s: status %s finished %d, want %s with a finish time", id, e.Task.Status, e.Task.FinishedAt, status)
		}
		if present, _, ttl := lastMsg(t, js, s, id); !present || ttl != "" {
			t.Errorf("%s: present %v, Nats-TTL %q; want the e2b1414 record, without a TTL", id, present, ttl)
		}
	}
	// Requeue of an e2b1414 DEAD record starts a new life whose claims carry tokens.
	dead := got["e2b-dead"]
	requeued, err := kvstore.Requeue(dead.Task, now, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, &requeued, dead.Revision); err != nil {
		t.Fatal(err)
	}
}

// A record this build cannot read is refused with the key's task id, its revision and what to do,
// and the store goes on with the others.
func TestCodecUnknownVersionInBucket(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := testContext(t)
	s := openJetStore(t, js, kvstore.Config{Bucket: newBucketName()})
	mustCreate(t, s, newTask("fine"))
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, kvstore.Key("later", s.Partitions()), []byte(`{"v":2,"id":"later"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "later")
	if !errors.Is(err, kvstore.ErrUnknownVersion) {
		t.Fatalf("Get: %v, want ErrUnknownVersion", err)
	}
	for _, want := range []string{"task later", "revision", "version 2", "run the build that wrote it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Get: %q does not say %q", err, want)
		}
	}
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, w)
	kinds := map[string]kvstore.EventKind{}
	for ev := nextEvent(t, w); ev.Kind != kvstore.EventInitDone; ev = nextEvent(t, w) {
		kinds[ev.ID] = ev.Kind
		if ev.ID == "later" && (ev.Revision != rev || !errors.Is(ev.Err, kvstore.ErrUnknownVersion)) {
			t.Errorf("watch event of later: %+v", ev)
		}
	}
	if kinds["fine"] != kvstore.EventPut || kinds["later"] != kvstore.EventError {
		t.Errorf("watch: %v, want fine put and later an error", kinds)
	}
}
