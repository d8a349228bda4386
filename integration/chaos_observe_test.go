package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// What the chaos, node-loss and failover tests watch and check: observers that see every fire,
// consumers that ack, nak or stay silent, a publisher that rides out faults, a watch on the
// bucket, and the fault log that a repeat must be explained by.

// headerReplica is the fire header naming the replica that fired (once replicas own partitions);
// before it exists the replica is read off the reply subject, ax.ack.<biz>.<replica>.<token>.<id>.
const headerReplica = "Ax-Replica"

// probeSubject is a fire subject no task uses: the consumers answer it, so that a request to it
// tells that their interest reached a node. Observers ignore it.
const probeSubject = bridge.FirePrefix + "_probe"

// fireKey is one attempt of one task as the bridge fired it.
type fireKey struct {
	id      string
	attempt int
	token   string
}

// fireSeen is what the observers saw of one attempt.
type fireSeen struct {
	fireKey
	due     time.Time
	at      time.Time // earliest receive time over the observers
	replica string
	strict  bool // the replica came from Ax-Replica, not from the reply subject
	copies  int  // most copies any one observer received
}

// observers are plain subscribers on ax.fire.>, one connection per NATS node, so that a node
// going down leaves the others watching. What they saw is merged per attempt.
type observers struct {
	mu    sync.Mutex
	seen  map[fireKey]*fireSeen
	per   []map[fireKey][]time.Time // per observer: when each copy arrived
	early []string                  // fires received before their Ax-Due-At
	bad   []string                  // fires whose headers or reply subject could not be read
}

func observe(t testing.TB, urls []string) *observers {
	t.Helper()
	o := &observers{seen: map[fireKey]*fireSeen{}}
	for i, url := range urls {
		o.per = append(o.per, map[fireKey][]time.Time{})
		nc := natstest.Connect(t, url)
		sub, err := nc.Subscribe(bridge.FirePrefix+">", func(m *nats.Msg) { o.add(i, m, time.Now()) })
		if err != nil {
			t.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

func (o *observers) add(i int, m *nats.Msg, at time.Time) {
	if m.Subject == probeSubject {
		return
	}
	a, aerr := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
	due, derr := time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderDueAt))
	// ax.ack.<biz>.<replica>.<token>.<id>
	tok := strings.SplitN(m.Reply, ".", 6)
	o.mu.Lock()
	defer o.mu.Unlock()
	id := m.Header.Get(bridge.HeaderTaskID)
	if aerr != nil || derr != nil || len(tok) != 6 || tok[5] != id {
		o.bad = append(o.bad, fmt.Sprintf("%s %v reply %q", m.Subject, m.Header, m.Reply))
		return
	}
	k := fireKey{id: id, attempt: a, token: tok[4]}
	if at.Before(due) {
		o.early = append(o.early, fmt.Sprintf("%s attempt %d %v before %v", id, a, due.Sub(at), due.Format(time.RFC3339Nano)))
	}
	o.per[i][k] = append(o.per[i][k], at)
	s := o.seen[k]
	if s == nil {
		s = &fireSeen{fireKey: k, due: due, at: at, replica: tok[3]}
		if r := m.Header.Get(headerReplica); r != "" {
			s.replica, s.strict = r, true
		}
		o.seen[k] = s
	}
	if at.Before(s.at) {
		s.at = at
	}
	s.copies = max(s.copies, len(o.per[i][k]))
}

// arrivals says when each observer received copies of k.
func (o *observers) arrivals(k fireKey, faults *faultLog) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	for i, per := range o.per {
		fmt.Fprintf(&b, "observer %d:", i)
		for _, at := range per[k] {
			fmt.Fprintf(&b, " +%s", faults.rel(at))
		}
		b.WriteString("; ")
	}
	return b.String()
}

// byTask is every attempt seen, per task, in order of arrival.
func (o *observers) byTask() map[string][]fireSeen {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]fireSeen{}
	for _, s := range o.seen {
		out[s.id] = append(out[s.id], *s)
	}
	for _, fs := range out {
		sort.Slice(fs, func(i, j int) bool { return fs[i].at.Before(fs[j].at) })
	}
	return out
}

// distinct is how many tasks have been seen firing.
func (o *observers) distinct(ids map[string]bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	for k := range o.seen {
		if ids[k.id] {
			seen[k.id] = true
		}
	}
	return len(seen)
}

// rates are the consumers' reply mix, in percent; the rest stay silent. From attempt alwaysAckFrom
// on, every fire is acked, so every task ends SUCCESS.
type rates struct {
	ack, nak      int
	alwaysAckFrom int
}

// consumers are a queue group in the test process that reply to fires by a seeded rule of the
// task id and attempt, so that a run is replayed by its seed. They note when they acked what.
type consumers struct {
	seed  uint64
	rates rates
	mu    sync.Mutex
	acked map[fireKey]time.Time
}

func consume(t testing.TB, urls []string, seed uint64, r rates) *consumers {
	t.Helper()
	c := &consumers{seed: seed, rates: r, acked: map[fireKey]time.Time{}}
	for _, url := range urls {
		nc := natstest.Connect(t, url)
		sub, err := nc.QueueSubscribe(bridge.FirePrefix+">", "workers", c.handle)
		if err != nil {
			t.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// decide is the reply to one attempt: "ack", "nak" or "silent".
func (c *consumers) decide(id string, attempt int) string {
	if attempt >= c.rates.alwaysAckFrom {
		return "ack"
	}
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], c.seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(attempt))
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	switch p := int(h.Sum64() % 100); {
	case p < c.rates.ack:
		return "ack"
	case p < c.rates.ack+c.rates.nak:
		return "nak"
	}
	return "silent"
}

func (c *consumers) handle(m *nats.Msg) {
	if m.Subject == probeSubject {
		_ = m.Respond(nil)
		return
	}
	id := m.Header.Get(bridge.HeaderTaskID)
	a, _ := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
	tok := strings.SplitN(m.Reply, ".", 6)
	if len(tok) != 6 {
		return
	}
	switch c.decide(id, a) {
	case "ack":
		c.mu.Lock()
		c.acked[fireKey{id: id, attempt: a, token: tok[4]}] = time.Now()
		c.mu.Unlock()
		_ = m.Ack()
	case "nak":
		_ = m.Nak()
	}
}

// ackedAt is when the consumers acked the attempt (zero if they did not).
func (c *consumers) ackedAt(k fireKey) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked[k]
}

// publisher schedules tasks through JetStream, retrying through elections; a task counts as
// accepted once the intake stream acknowledged it.
type publisher struct {
	js       jetstream.JetStream
	mu       sync.Mutex
	accepted map[string]bool
	failed   int
}

func newPublisher(t testing.TB, url string) *publisher {
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{js: js, accepted: map[string]bool{}}
}

// publish schedules task id, due after delay, with the chaos tasks' policy.
func (p *publisher) publish(id, biz string, delay time.Duration, extra ...string) {
	p.publishHeaders(id, biz, append([]string{bridge.HeaderDelay, strconv.FormatInt(delay.Milliseconds(), 10)}, extra...)...)
}

// publishSpread schedules n tasks <biz>-<i> due from first to first+over, evenly, with
// pipelined publishes (one that fails is published again on its own), and returns once each
// was accepted or refused.
func (p *publisher) publishSpread(biz string, n int, first time.Time, over time.Duration, extra ...string) {
	msg := func(i int) (string, []string) {
		at := first.Add(time.Duration(i) * over / time.Duration(n))
		return biz + "-" + strconv.Itoa(i), append([]string{bridge.HeaderDeliverAt, strconv.FormatInt(at.UnixMilli(), 10)}, extra...)
	}
	futures := make([]jetstream.PubAckFuture, n)
	for i := range n {
		id, hdr := msg(i)
		m := nats.NewMsg(bridge.SchedulePrefix + biz)
		m.Data = []byte(id)
		m.Header.Set(bridge.HeaderTaskID, id)
		for j := 0; j+1 < len(hdr); j += 2 {
			m.Header.Set(hdr[j], hdr[j+1])
		}
		futures[i], _ = p.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
	}
	for i, f := range futures {
		id, hdr := msg(i)
		if f != nil {
			select {
			case <-f.Ok():
				p.mu.Lock()
				p.accepted[id] = true
				p.mu.Unlock()
				continue
			case <-f.Err():
			case <-time.After(time.Minute):
			}
		}
		p.publishHeaders(id, biz, hdr...) // the task id makes a repeat a duplicate of the same task
	}
}

// publishHeaders schedules task id with the headers kv (name, value, ...).
func (p *publisher) publishHeaders(id, biz string, extra ...string) {
	m := nats.NewMsg(bridge.SchedulePrefix + biz)
	m.Data = []byte(id)
	m.Header.Set(bridge.HeaderTaskID, id)
	for i := 0; i+1 < len(extra); i += 2 {
		m.Header.Set(extra[i], extra[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(200), jetstream.WithRetryWait(50*time.Millisecond))
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed++ // not accepted as far as the test knows (it may be stored all the same)
		return
	}
	p.accepted[id] = true
}

func (p *publisher) ids() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.accepted)
}

// revisionWatch watches the whole bucket and notes every key whose revision went backwards.
type revisionWatch struct {
	mu        sync.Mutex
	last      map[string]uint64
	updates   int
	backwards []string
	repeated  int // the same revision delivered again (not backwards)
}

func watchRevisions(t testing.TB, url string) *revisionWatch {
	t.Helper()
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var kv jetstream.KeyValue
	if !checkFor(30*time.Second, func() bool {
		kv, err = js.KeyValue(ctx, kvstore.DefaultBucket)
		return err == nil
	}) {
		cancel()
		t.Fatalf("bucket %s: %v", kvstore.DefaultBucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &revisionWatch{last: map[string]uint64{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			r.mu.Lock()
			r.updates++
			switch last := r.last[e.Key()]; {
			case e.Revision() < last:
				r.backwards = append(r.backwards, fmt.Sprintf("%s: %d after %d", e.Key(), e.Revision(), last))
			case e.Revision() == last:
				r.repeated++
			default:
				r.last[e.Key()] = e.Revision()
			}
			r.mu.Unlock()
		}
	})
	t.Cleanup(func() { _ = w.Stop(); cancel(); wg.Wait() })
	return r
}

// fault is one injected fault, as it happened.
type fault struct {
	kind    string // kill9, stop, cut, nats-kill9
	target  string // a replica id, or a NATS node name
	start   time.Time
	end     time.Time // when the target was back (restarted, resumed, reconnected)
	settled time.Time // end plus the time its effects may last
}

// faultLog is the run's fault timeline, logged as it happens.
type faultLog struct {
	t      testing.TB
	origin time.Time
	mu     sync.Mutex
	faults []fault
}

func (l *faultLog) rel(at time.Time) string {
	return at.Sub(l.origin).Truncate(time.Millisecond).String()
}

func (l *faultLog) add(f fault) {
	l.mu.Lock()
	l.faults = append(l.faults, f)
	l.mu.Unlock()
	l.t.Logf("fault %-10s %-4s at +%s, back at +%s", f.kind, f.target, l.rel(f.start), l.rel(f.end))
}

func (l *faultLog) byKind() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, f := range l.faults {
		n[f.kind]++
	}
	return n
}

// explain names the fault that explains a repeat of an attempt fired by replica at first and
// fired again at again: one on that replica (on any replica, while the fire does not say which
// replica holds its ack: acks then go to a queue group of all of them), or a NATS node's loss,
// in effect at some time between the two fires.
func (l *faultLog) explain(replica string, strict bool, first, again time.Time) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A fault on the replica itself first, then a NATS node's, then (not strict) any replica's.
	for _, pass := range []func(f fault) bool{
		func(f fault) bool { return f.target == replica },
		func(f fault) bool { return f.kind == "nats-kill9" },
		func(fault) bool { return !strict },
	} {
		for _, f := range l.faults {
			if f.start.After(again) || f.settled.Before(first.Add(-time.Second)) {
				continue
			}
			if pass(f) {
				return f.kind + " " + f.target, true
			}
		}
	}
	return "", false
}

// report is what a run's checks found.
type report struct {
	tasks, lost, early, dupAttempts, notHigher, tokensBack int
	repeats, explained                                     int
	lateOlder                                              int // older attempts delivered after a newer one was acked
	byCause                                                map[string]int
	strictRepeats                                          int // repeats whose replica came from Ax-Replica
	firstLateness                                          []time.Duration
	unexplained                                            []string
}

// checkFires runs the invariants on what the observers saw of the accepted tasks: each fired;
// none early; no attempt twice; a repeat (a fire after an acked attempt) carries a higher attempt
// and follows a fault on the replica that held it; tokens grow with attempts.
func checkFires(t testing.TB, ids map[string]bool, o *observers, c *consumers, faults *faultLog) report {
	t.Helper()
	r := report{tasks: len(ids), byCause: map[string]int{}}
	fires := o.byTask()
	for id := range ids {
		fs := fires[id]
		if len(fs) == 0 {
			r.lost++
			if r.lost <= 10 {
				t.Errorf("task %s never fired", id)
			}
			continue
		}
		r.firstLateness = append(r.firstLateness, fs[0].at.Sub(fs[0].due))
		byAttempt := slices.Clone(fs)
		sort.Slice(byAttempt, func(i, j int) bool { return byAttempt[i].attempt < byAttempt[j].attempt })
		for i, f := range byAttempt {
			if f.copies > 1 {
				r.dupAttempts++
				t.Errorf("task %s attempt %d (token %s, replica %s, first at +%s) fired %d times: %s", id, f.attempt, f.token, f.replica, faults.rel(f.at), f.copies, o.arrivals(f.fireKey, faults))
			}
			if i > 0 {
				prev := byAttempt[i-1]
				a, _ := strconv.ParseUint(f.token, 10, 64)
				b, _ := strconv.ParseUint(prev.token, 10, 64)
				if f.attempt == prev.attempt || a <= b {
					r.tokensBack++
					t.Errorf("task %s: attempt %d token %s after attempt %d token %s", id, f.attempt, f.token, prev.attempt, prev.token)
				}
			}
		}
		for i, f := range fs {
			for _, e := range fs[:i] {
				ack := c.ackedAt(e.fireKey)
				if ack.IsZero() || !ack.Before(f.at) {
					continue
				}
				cause, ok := faults.explain(e.replica, e.strict, e.at, f.at)
				switch {
				case f.attempt < e.attempt:
					// An older attempt delivered after a newer one: a fire that waited in its
					// bridge's reconnect buffer (subjects.md, "Firing"). Its ack is ignored; it
					// must follow a fault all the same.
					r.lateOlder++
					if !ok {
						t.Errorf("task %s: attempt %d arrived after attempt %d was acked, with no fault to explain it", id, f.attempt, e.attempt)
					}
					continue
				case f.attempt == e.attempt:
					r.notHigher++
					t.Errorf("task %s: attempt %d fired again after it was acked", id, f.attempt)
				}
				r.repeats++ // f fired after the consumer acked e
				if f.strict {
					r.strictRepeats++
				}
				if ok {
					r.explained++
					r.byCause[strings.Fields(cause)[0]]++
				} else {
					r.unexplained = append(r.unexplained, fmt.Sprintf("%s attempt %d (replica %s, at +%s, acked) again as attempt %d at +%s",
						id, e.attempt, e.replica, faults.rel(e.at), f.attempt, faults.rel(f.at)))
				}
				break
			}
		}
	}
	o.mu.Lock()
	r.early = len(o.early)
	for _, s := range o.early[:min(len(o.early), 10)] {
		t.Errorf("early fire: %s", s)
	}
	for _, s := range o.bad[:min(len(o.bad), 10)] {
		t.Errorf("unreadable fire: %s", s)
	}
	o.mu.Unlock()
	for _, s := range r.unexplained[:min(len(r.unexplained), 20)] {
		t.Errorf("repeat explained by no fault: %s", s)
	}
	return r
}

// log writes the report's figures.
func (r report) log(t testing.TB, faults *faultLog) {
	t.Helper()
	slices.Sort(r.firstLateness)
	pct := func(q float64) time.Duration {
		if len(r.firstLateness) == 0 {
			return 0
		}
		return r.firstLateness[min(len(r.firstLateness)-1, int(q*float64(len(r.firstLateness))))]
	}
	rate := 0.0
	if r.tasks > 0 {
		rate = 100 * float64(r.repeats) / float64(r.tasks)
	}
	t.Logf("tasks %d, faults %v; lost %d, early %d, attempts fired twice %d, older attempts delivered late %d",
		r.tasks, faults.byKind(), r.lost, r.early, r.dupAttempts, r.lateOlder)
	t.Logf("repeats %d (%.2f%% of tasks; bar <= 1%%), explained %d by %v, unexplained %d; attributed by Ax-Replica: %d, by reply subject (any replica's fault): %d",
		r.repeats, rate, r.explained, r.byCause, len(r.unexplained), r.strictRepeats, r.repeats-r.strictRepeats)
	t.Logf("lateness of first fires: p50 %v, p99 %v, max %v", pct(0.50), pct(0.99), pct(1))
}

// settle waits (within) until every accepted task's record is SUCCESS, then checks that none is
// RUNNING past its lease or WAITING past due, reading the ones still unsettled from the leader.
func settle(t testing.TB, store *kvstore.JetStore, ids map[string]bool, within time.Duration, leaseSkew time.Duration) {
	t.Helper()
	left := make([]string, 0, len(ids))
	for id := range ids {
		left = append(left, id)
	}
	slices.Sort(left)
	checkFor(within, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		es, err := store.GetMany(ctx, left)
		if err != nil {
			return false
		}
		done := map[string]bool{}
		for _, e := range es {
			if e.Task.Status == kvstore.StatusSuccess {
				done[e.Task.ID] = true
			}
		}
		left = slices.DeleteFunc(left, func(id string) bool { return done[id] })
		return len(left) == 0
	})
	now := time.Now().UnixMilli()
	for _, id := range left[:min(len(left), 20)] {
		e, err := store.Get(context.Background(), id)
		switch {
		case err != nil:
			t.Errorf("task %s: %v", id, err)
		case e.Task.Status == kvstore.StatusRunning && e.Task.LeaseUntil+leaseSkew.Milliseconds() < now:
			t.Errorf("task %s RUNNING %v past its lease (owner %s, attempt %d)", id, time.Duration(now-e.Task.LeaseUntil)*time.Millisecond, e.Task.Owner, e.Task.Attempt)
		case e.Task.Status == kvstore.StatusWaiting && e.Task.DueAt < now:
			t.Errorf("task %s WAITING %v past due (attempt %d)", id, time.Duration(now-e.Task.DueAt)*time.Millisecond, e.Task.Attempt)
		default:
			t.Errorf("task %s not settled within %v: %s, attempt %d", id, within, e.Task.Status, e.Task.Attempt)
		}
	}
	if len(left) > 0 {
		t.Errorf("%d of %d tasks not SUCCESS at the end", len(left), len(ids))
	}
}

// chaosSeed is AX_CHAOS_SEED, or the time; the test logs it so a failure can be replayed.
func chaosSeed(t testing.TB) uint64 {
	if s := envInt("AX_CHAOS_SEED", 0); s != 0 {
		return uint64(s)
	}
	return uint64(time.Now().UnixNano())
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// durSpread is "p50 … p90 … p99 … max …" of ds (sorted here), or "none".
func durSpread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Truncate(time.Millisecond)
	}
	return fmt.Sprintf("min %v, p50 %v, p90 %v, p99 %v, max %v", ds[0].Truncate(time.Millisecond), q(0.5), q(0.9), q(0.99), ds[len(ds)-1].Truncate(time.Millisecond))
}

// spreadOf is "min … median … max …" of the sorted vs, each written by f, or "none".
func spreadOf[T any](vs []T, f func(T) string) string {
	if len(vs) == 0 {
		return "none"
	}
	return fmt.Sprintf("min %s, median %s, max %s", f(vs[0]), f(vs[len(vs)/2]), f(vs[len(vs)-1]))
}

func fmtPct(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }
