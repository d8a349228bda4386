package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/internal/faultstore"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// purgeRig is a real nats-server, a client connection and its JetStream.
type purgeRig struct {
	t   *testing.T
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newPurgeRig(t *testing.T) *purgeRig {
	t.Helper()
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &purgeRig{t: t, srv: srv, nc: nc, js: js}
}

// start starts a bridge on its own connection and stops it when the test ends.
func (r *purgeRig) start(store Store, cfg Config) *Bridge {
	r.t.Helper()
	b, err := New(natstest.Connect(r.t, r.srv.ClientURL()), store, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			r.t.Errorf("stop: %v", err)
		}
	})
	return b
}

// schedule publishes task id far in the future and returns its stream sequence.
func (r *purgeRig) schedule(id string) uint64 {
	r.t.Helper()
	m := nats.NewMsg(SchedulePrefix + "orders")
	m.Header.Set(HeaderTaskID, id)
	m.Header.Set(HeaderDelay, "1h")
	m.Data = []byte("x")
	ack, err := r.js.PublishMsg(context.Background(), m)
	if err != nil {
		r.t.Fatalf("schedule %s: %v", id, err)
	}
	return ack.Sequence
}

// state is the intake stream's state.
func (r *purgeRig) state() jetstream.StreamState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, "AX_SCHEDULE")
	if err != nil {
		r.t.Fatal(err)
	}
	return s.CachedInfo().State
}

// waitFor fails the test unless cond holds within 30s.
func (r *purgeRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	if !checkFor(30*time.Second, cond) {
		r.t.Fatalf("not within 30s: %s (stream %+v)", what, r.state())
	}
}

// purgeRequests counts the purge requests of the intake stream by the requesting connection's
// inbox prefix, as seen by a subscriber to the API subject.
type purgeRequests struct {
	mu sync.Mutex
	by map[string]int
}

func (r *purgeRig) watchPurges() *purgeRequests {
	r.t.Helper()
	pr := &purgeRequests{by: map[string]int{}}
	sub, err := r.nc.Subscribe("$JS.API.STREAM.PURGE.AX_SCHEDULE", func(m *nats.Msg) {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.by[inboxPrefix(m.Reply)]++
	})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return pr
}

// requesters is the connections (inbox prefixes) that sent purge requests, with their counts.
func (pr *purgeRequests) requesters() map[string]int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return maps.Clone(pr.by)
}

func (pr *purgeRequests) total() int {
	n := 0
	for _, c := range pr.requesters() {
		n += c
	}
	return n
}

func inboxPrefix(reply string) string { return reply[:strings.LastIndexByte(reply, '.')] }

// ownInbox is the inbox prefix of b's JetStream requests.
func ownInbox(b *Bridge) string { return inboxPrefix(b.nc.NewRespInbox()) }

func stored(store kvstore.Store, ids ...string) func() bool {
	return func() bool {
		for _, id := range ids {
			if _, err := store.Get(context.Background(), id); err != nil {
				return false
			}
		}
		return true
	}
}

// The housekeeper purges the intake stream up to the consumer's ack floor, never past it: a
// schedule whose record create keeps failing stays in the stream across purges (so do the stored
// ones behind it), and once its create succeeds it is stored and the stream empties.
func TestIntakePurgeKeepsUnstoredSchedules(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	mem := kvstore.NewMemStore(0)
	store := faultstore.New(mem)
	store.Inject(faultstore.Rule{Op: faultstore.OpCreate, ID: "held", Mode: faultstore.FailBefore,
		Err: fmt.Errorf("kvstore: no answer: %w", context.DeadlineExceeded)})
	reg := prometheus.NewRegistry()
	b := r.start(store, Config{Registerer: reg})
	purges := r.watchPurges()

	ctx := context.Background()
	s, err := r.js.Stream(ctx, "AX_SCHEDULE")
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.CachedInfo().Config; sc.Retention != jetstream.LimitsPolicy || sc.Discard != jetstream.DiscardNew || sc.MaxMsgs != intakeMaxMsgs || sc.MaxAge != 0 {
		t.Errorf("intake stream: retention %v, discard %v, max msgs %d, max age %v; want limits, discard new, %d, none",
			sc.Retention, sc.Discard, sc.MaxMsgs, sc.MaxAge, intakeMaxMsgs)
	}

	var before, after []string
	for i := range 5 {
		before = append(before, fmt.Sprintf("a-%d", i))
		r.schedule(before[i])
	}
	heldSeq := r.schedule("held")
	for i := range 5 {
		after = append(after, fmt.Sprintf("b-%d", i))
		r.schedule(after[i])
	}
	r.waitFor("records before and after the held one stored", stored(mem, append(before, after...)...))
	// The housekeeper's rounds purge the five below the held schedule, and no more.
	r.waitFor("the schedules below the held one purged", func() bool { return r.state().FirstSeq == heldSeq })
	for range 3 { // more rounds, now from here, with the same floor
		p, err := b.purgeIntake(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.floor != heldSeq-1 || p.purged != 0 {
			t.Fatalf("purge round: floor %d, purged %d; want floor %d, nothing purged", p.floor, p.purged, heldSeq-1)
		}
	}
	if st := r.state(); st.FirstSeq != heldSeq || st.Msgs != 6 {
		t.Fatalf("stream after purges: first %d, %d msgs; want first %d (the held one), 6 msgs", st.FirstSeq, st.Msgs, heldSeq)
	}
	m, err := s.GetMsg(ctx, heldSeq)
	if err != nil || m.Header.Get(HeaderTaskID) != "held" {
		t.Fatalf("the held schedule is not in the stream: %v %v", err, m)
	}
	if _, err := mem.Get(ctx, "held"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("held task: %v, want not found", err)
	}

	store.Clear() // the store takes it on the next delivery
	r.waitFor("the held schedule stored", stored(mem, "held"))
	r.waitFor("the stream empty", func() bool { return r.state().Msgs == 0 })
	// Only purges empty a limits stream, and they came from this bridge. The count follows the
	// purge's answer; a round whose answer came too late counts as an error though its purge was
	// done, so the count is exact only when no round failed. The stream is empty once the server
	// purged; the answer, and the count, come a moment later.
	r.waitFor("the purges counted", func() bool {
		return metricValue(t, reg, "ax_intake_purged_total") >= 11 || metricValue(t, reg, "ax_intake_purge_errors_total") > 0
	})
	if got := purges.requesters(); len(got) != 1 || got[ownInbox(b)] == 0 {
		t.Errorf("purge requests by connection %v, want them from the bridge's (%s) alone", got, ownInbox(b))
	}
	purged, failed := metricValue(t, reg, "ax_intake_purged_total"), metricValue(t, reg, "ax_intake_purge_errors_total")
	if purged > 11 || failed == 0 && purged != 11 {
		t.Errorf("ax_intake_purged_total = %v with %v failed rounds, want 11 (at most 11 if some failed)", purged, failed)
	}
}

// A create that landed but whose answer was lost is redelivered (as after a server crash that
// lost the consumer's acks: the schedule comes back though its task is stored); the redelivery is
// reported as a duplicate and acked, and then purged.
func TestIntakeRedeliveryOfStoredIsDuplicate(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	dups, err := r.nc.SubscribeSync(DuplicatePrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	mem := kvstore.NewMemStore(0)
	store := faultstore.New(mem)
	store.Inject(faultstore.Rule{Op: faultstore.OpCreate, ID: "order-1", Mode: faultstore.ApplyThenTimeout, Times: 1})
	reg := prometheus.NewRegistry()
	r.start(store, Config{Registerer: reg})
	r.schedule("order-1")
	d, err := dups.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no duplicate reported: %v", err)
	}
	if d.Header.Get(HeaderTaskID) != "order-1" || d.Header.Get(HeaderStatus) != string(kvstore.StatusWaiting) {
		t.Errorf("duplicate %v, want order-1 WAITING", d.Header)
	}
	r.waitFor("the redelivered schedule acked and purged", func() bool { return r.state().Msgs == 0 })
	if got := metricValue(t, reg, "ax_intake_redeliveries_total"); got != 1 {
		t.Errorf("ax_intake_redeliveries_total = %v, want 1", got)
	}
}

// An intake stream with work-queue retention (as bridges before limits retention created it)
// keeps working: each ack removes its message, the housekeeper purges nothing and says once what
// the stream costs.
func TestIntakeWorkQueueStreamStillWorks(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	ctx := context.Background()
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "AX_SCHEDULE", Subjects: []string{SchedulePrefix + ">"},
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	mem := kvstore.NewMemStore(0)
	r.start(mem, Config{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("wq-%d", i))
		r.schedule(ids[i])
	}
	r.waitFor("records stored", stored(mem, ids...))
	r.waitFor("the stream empty", func() bool { return r.state().Msgs == 0 })
	const note = "intake stream removes each schedule message as it is acked"
	r.waitFor("the retention noted", func() bool { return strings.Contains(logs.String(), note) })
	if out := logs.String(); strings.Count(out, note) != 1 || !strings.Contains(out, "retention=WorkQueue") {
		t.Errorf("retention note logged %d times, want once, with the retention:\n%s", strings.Count(out, note), out)
	}
	if got := metricValue(t, reg, "ax_intake_purged_total"); got != 0 {
		t.Errorf("ax_intake_purged_total = %v on a work-queue stream, want 0", got)
	}
}

// With two replicas, the one that is the housekeeper purges; the other does not even look at
// the consumer's ack floor (the requests for it, seen by a subscriber to the API subject, all come
// from one connection's inbox).
func TestIntakeOneHousekeeperPurges(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	mem := kvstore.NewMemStore(0)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	bs := []*Bridge{
		r.start(mem, Config{ReplicaID: "r1", Registerer: regs[0]}),
		r.start(mem, Config{ReplicaID: "r2", Registerer: regs[1]}),
	}
	var mu sync.Mutex
	askers := map[string]int{} // inbox prefix of the requester -> consumer info requests
	infos, err := r.nc.Subscribe("$JS.API.CONSUMER.INFO.AX_SCHEDULE.axbridge", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		askers[m.Reply[:strings.LastIndexByte(m.Reply, '.')]]++
	})
	if err != nil {
		t.Fatal(err)
	}
	defer infos.Unsubscribe()
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	purges := r.watchPurges()
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("m-%d", i))
		r.schedule(ids[i])
	}
	r.waitFor("records stored", stored(mem, ids...))
	r.waitFor("the stream empty", func() bool { return r.state().Msgs == 0 })
	// The stream is empty once the server purged; the housekeeper counts the purge when the
	// answer is back, a moment later.
	sum := func(name string) (n float64) {
		for _, reg := range regs {
			n += metricValue(t, reg, name)
		}
		return n
	}
	r.waitFor("the purges counted", func() bool {
		return sum("ax_intake_purged_total") >= 100 || sum("ax_intake_purge_errors_total") > 0
	})
	// Only purges empty a limits stream: they all came from one connection, the housekeeper's.
	got := purges.requesters()
	housekeepers := 0
	for i, b := range bs {
		n := got[ownInbox(b)]
		t.Logf("replica %s: housekeeper %v, purge requests %d, purged %v, failed rounds %v", b.cfg.ReplicaID, b.house.Load(), n,
			metricValue(t, regs[i], "ax_intake_purged_total"), metricValue(t, regs[i], "ax_intake_purge_errors_total"))
		if b.house.Load() {
			housekeepers++
			if n == 0 {
				t.Errorf("replica %s is the housekeeper but sent no purge", b.cfg.ReplicaID)
			}
		} else if n > 0 {
			t.Errorf("replica %s sent %d purges but is not the housekeeper", b.cfg.ReplicaID, n)
		}
	}
	if housekeepers != 1 || len(got) != 1 {
		t.Errorf("%d housekeepers, purge requests by connection %v; want one housekeeper, the one purger", housekeepers, got)
	}
	total, errs := sum("ax_intake_purged_total"), sum("ax_intake_purge_errors_total")
	if total > 100 || errs == 0 && total != 100 {
		t.Errorf("%v messages purged with %v failed rounds, want 100 (at most 100 if some failed)", total, errs)
	}
	r.waitFor("three purge rounds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range askers {
			n += c
		}
		return n >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if len(askers) != 1 {
		t.Errorf("the intake consumer's info was asked for by %d connections, want one (the housekeeper's): %v", len(askers), askers)
	}
}

func TestOnlySchedule(t *testing.T) {
	t.Parallel()
	s := subjectsOf("ax")
	for subj, want := range map[string]bool{
		"ax.schedule.>": true, "ax.schedule.orders": true, "ax.schedule.*": true,
		"ax.>": false, ">": false, "ax.schedule.": false, "ax.fire.>": false,
	} {
		if got := s.onlySchedule([]string{subj}); got != want {
			t.Errorf("onlySchedule(%q) = %v, want %v", subj, got, want)
		}
	}
	if s.onlySchedule(nil) || s.onlySchedule([]string{"ax.schedule.>", "ax.other"}) {
		t.Error("no subjects, or one outside the schedules, counted as schedules only")
	}
}
