package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// While another consumer reads the intake stream (another deployment's, an operator's), the
// housekeeper does not purge it: the intake consumer's ack floor says nothing of what that one
// has read. It says so once at Warn and counts the skipped rounds; once the other consumer is
// deleted, the stream is purged again.
func TestIntakePurgeSkipsWhileAnotherConsumerReads(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	mem := kvstore.NewMemStore(0)
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	b := r.start(mem, Config{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	if _, err := r.js.CreateConsumer(ctx, "AX_SCHEDULE", jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("o-%d", i))
		r.schedule(ids[i])
	}
	r.waitFor("records stored", stored(mem, ids...))
	const note = "intake stream has 2 consumers"
	r.waitFor("the skip logged", func() bool { return strings.Contains(logs.String(), note) })
	r.waitFor("two rounds skipped", func() bool { return metricValue(t, reg, "ax_intake_purge_skipped_total") >= 2 })
	for range 2 {
		p, err := b.purgeIntake(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !p.unsafe || p.purged != 0 {
			t.Fatalf("purge round with another consumer: %+v, want skipped as unsafe", p)
		}
	}
	if st := r.state(); st.Msgs != 5 {
		t.Fatalf("stream with another consumer: %d msgs, want the 5 it has not read", st.Msgs)
	}
	if out := logs.String(); strings.Count(out, note) != 1 || !strings.Contains(out, "level=WARN") {
		t.Errorf("skip logged %d times, want once at Warn:\n%s", strings.Count(out, note), out)
	}
	if err := r.js.DeleteConsumer(ctx, "AX_SCHEDULE", "audit"); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the stream purged once the other consumer is gone", func() bool { return r.state().Msgs == 0 })
}

// An operator's intake consumer with a max deliver gives up a message a bridge stopped during
// each of its last deliveries, leaving it below the ack floor: the housekeeper does not purge a
// limits stream while the consumer has one, and does once the operator removes it.
func TestIntakePurgeSkipsConsumerWithMaxDeliver(t *testing.T) {
	t.Parallel()
	r := newPurgeRig(t)
	ctx := context.Background()
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "AX_SCHEDULE", Subjects: []string{SchedulePrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	cc := jetstream.ConsumerConfig{Durable: "axbridge", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 22}
	if _, err := r.js.CreateConsumer(ctx, "AX_SCHEDULE", cc); err != nil {
		t.Fatal(err)
	}
	mem := kvstore.NewMemStore(0)
	reg := prometheus.NewRegistry()
	b := r.start(mem, Config{Registerer: reg})
	r.schedule("md-1")
	r.waitFor("the record stored", stored(mem, "md-1"))
	r.waitFor("two rounds skipped", func() bool { return metricValue(t, reg, "ax_intake_purge_skipped_total") >= 2 })
	p, err := b.purgeIntake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.unsafe || p.purged != 0 || !strings.Contains(p.skip, "max deliver 22") || !strings.Contains(p.todo, "--max-deliver=-1") {
		t.Fatalf("purge round with max deliver 22: %+v, want skipped, saying how to fix it", p)
	}
	if st := r.state(); st.Msgs != 1 {
		t.Fatalf("stream: %d msgs, want 1", st.Msgs)
	}
	cc.MaxDeliver = -1
	if _, err := r.js.UpdateConsumer(ctx, "AX_SCHEDULE", cc); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the stream purged once the consumer has no max deliver", func() bool { return r.state().Msgs == 0 })
}

// A purge the bridge's user may not send fails every round: the first failure is a Warn with the
// error, not a Debug line.
func TestIntakePurgeDeniedWarns(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.PURGE.>"}},
		}}}
	})
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // the server's permission errors
	b, err := New(natstest.Connect(t, srv.ClientURL(), nats.UserInfo("bridge", "pw"), quiet), kvstore.NewMemStore(0),
		Config{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL(), nats.UserInfo("bridge", "pw")))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(SchedulePrefix + "orders")
	m.Header.Set(HeaderTaskID, "denied-1")
	m.Header.Set(HeaderDelay, "1h")
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	const warn = "intake purge failed"
	if !checkFor(60*time.Second, func() bool { return strings.Contains(logs.String(), warn) }) {
		t.Fatalf("no purge failure logged:\n%s", logs.String())
	}
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, warn) {
			line = l
			break
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "err=") || !strings.Contains(line, "$JS.API.STREAM.PURGE.AX_SCHEDULE") {
		t.Errorf("purge failure logged as %q, want a Warn with the error and the permission it needs", line)
	}
	if got := metricValue(t, reg, "ax_intake_purge_errors_total"); got < 1 {
		t.Errorf("ax_intake_purge_errors_total = %v, want at least 1", got)
	}
}

// Consecutive purge failures are logged at Warn on the first and every intakePurgeWarnEvery-th,
// the recovery at Info once, and a new run of failures again at Warn.
func TestPurgeFailuresLogging(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	var f purgeFailures
	count := func(s string) int { return strings.Count(logs.String(), s) }
	boom := errors.New("boom")
	f.ok(log, "S")
	for range 2*intakePurgeWarnEvery + 1 {
		f.failed(log, "S", boom)
	}
	if n := count("level=WARN msg=\"intake purge failed"); n != 3 {
		t.Errorf("%d Warns for %d failed rounds, want 3 (first, %dth, %dth):\n%s", n, 2*intakePurgeWarnEvery+1, intakePurgeWarnEvery, 2*intakePurgeWarnEvery, logs.String())
	}
	if !strings.Contains(logs.String(), "err=boom") || !strings.Contains(logs.String(), "failed_rounds=60") {
		t.Errorf("Warns without the error or the count:\n%s", logs.String())
	}
	f.ok(log, "S")
	f.ok(log, "S")
	if n := count("level=INFO msg=\"intake purge works again\""); n != 1 || !strings.Contains(logs.String(), "failed_rounds=61") {
		t.Errorf("recovery logged %d times, want once with the count:\n%s", n, logs.String())
	}
	f.failed(log, "S", boom)
	if n := count("level=WARN msg=\"intake purge failed"); n != 4 {
		t.Errorf("a new failure after recovery: %d Warns in all, want 4", n)
	}
}

func TestPurgeUnsafe(t *testing.T) {
	t.Parallel()
	all := []string{"ax.schedule.>"}
	for _, c := range []struct {
		cc      jetstream.ConsumerConfig
		subject []string
		unsafe  bool
	}{
		{jetstream.ConsumerConfig{MaxDeliver: -1}, all, false},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubject: "ax.schedule.>"}, all, false},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubject: "ax.>"}, all, false},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubjects: []string{"ax.schedule.a", "ax.schedule.b.*"}}, []string{"ax.schedule.a", "ax.schedule.b.x"}, false},
		{jetstream.ConsumerConfig{MaxDeliver: 0}, all, false},
		{jetstream.ConsumerConfig{MaxDeliver: 22}, all, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, DeliverPolicy: jetstream.DeliverNewPolicy}, all, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 5}, all, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubject: "ax.schedule.orders"}, all, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubject: "ax.schedule.*"}, all, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubjects: []string{"ax.schedule.a"}}, []string{"ax.schedule.a", "ax.schedule.b"}, true},
		{jetstream.ConsumerConfig{MaxDeliver: -1, FilterSubject: "ax.schedule.a"}, []string{"ax.schedule.*"}, true},
	} {
		if why := purgeUnsafe(c.cc, c.subject); (why != "") != c.unsafe {
			t.Errorf("purgeUnsafe(%+v, %q) = %q, want unsafe %v", c.cc, c.subject, why, c.unsafe)
		}
	}
}
