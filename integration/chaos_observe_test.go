package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
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
	firedAt time.Time // Ax-Fired-At: when the firing replica decided to send it (zero if absent)
	strict  bool      // the replica came from Ax-Replica, not from the reply subject
	copies  int       // most copies any one observer received
	run     int       // Ax-Run of a series' occurrence (0: a one-shot task)
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
		s.run, _ = strconv.Atoi(m.Header.Get(bridge.HeaderRun))
		s.firedAt, _ = time.Parse(time.RFC3339Nano, m.Header.Get(bridge.HeaderFiredAt))
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
	repeated  int                  // the same revision delivered again (not backwards)
	success   map[string]time.Time // task id → when its first SUCCESS record arrived
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
	r := &revisionWatch{last: map[string]uint64{}, success: map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			now := time.Now()
			task, derr := kvstore.DecodeTask(e.Value())
			r.mu.Lock()
			r.updates++
			if derr == nil && task.Status == kvstore.StatusSuccess && r.success[task.ID].IsZero() {
				r.success[task.ID] = now
			}
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
