package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// authConf is the server config fragment with the roles of permissions.md; the compose file
// includes the same file.
const authConf = "../docker/nats/auth.conf"

// roleConn is one client connection as one user, with every asynchronous error the server sent
// it (permission violations arrive that way).
type roleConn struct {
	nc   *nats.Conn
	errs chan error
}

// connectAs connects as user with the inbox prefix the role's permissions allow.
func connectAs(t *testing.T, url, user, password, inboxPrefix string) *roleConn {
	t.Helper()
	rc := &roleConn{errs: make(chan error, 100)}
	opts := []nats.Option{
		nats.UserInfo(user, password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case rc.errs <- err:
			default:
			}
		}),
	}
	if inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(inboxPrefix))
	}
	rc.nc = natstest.Connect(t, url, opts...)
	return rc
}

// refused waits for the server's permissions violation on what (a subject, as the server names
// it) and fails the test without one.
func (rc *roleConn) refused(t *testing.T, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-rc.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+what+`"`) {
				t.Logf("refused as expected: %v", err)
				return
			}
			t.Errorf("async error %v while waiting for the violation on %q", err, what)
		case <-timeout:
			t.Fatalf("no permissions violation on %q", what)
		}
	}
}

// clean checks that the connection got no asynchronous error at all.
func (rc *roleConn) clean(t *testing.T, user string) {
	t.Helper()
	for {
		select {
		case err := <-rc.errs:
			t.Errorf("%s: unexpected async error: %v", user, err)
		default:
			return
		}
	}
}

// authServer starts a server with the users of docker/nats/auth.conf, parsed from the file with
// the password environment variables set here, plus a test-only user "admin" without limits
// that plays the parts no role in the file may play (a coupon producer and consumer) and checks
// records. It returns the server and each user's password.
func authServer(t *testing.T) (*natstest.Server, map[string]string) {
	t.Helper()
	pw := map[string]string{}
	for _, user := range []string{"bridge", "producer", "consumer", "operator"} {
		pw[user] = "pw-" + user + "-" + nats.NewInbox()[len(nats.InboxPrefix):]
		t.Setenv("AX_"+strings.ToUpper(user)+"_PASSWORD", pw[user])
	}
	parsed, err := server.ProcessConfigFile(authConf)
	if err != nil {
		t.Fatalf("%s: %v", authConf, err)
	}
	if len(parsed.Users) != 4 {
		t.Fatalf("%s: %d users, want bridge, producer, consumer and operator", authConf, len(parsed.Users))
	}
	for _, u := range parsed.Users {
		if u.Password != pw[u.Username] {
			t.Fatalf("%s: user %q does not take its password from AX_%s_PASSWORD", authConf, u.Username, strings.ToUpper(u.Username))
		}
	}
	pw["admin"] = "pw-admin"
	srv := natstest.RunServer(t, func(o *server.Options) {
		o.Users = append(parsed.Users, &server.User{Username: "admin", Password: pw["admin"]})
	})
	return srv, pw
}

// Each role of permissions.md, loaded from docker/nats/auth.conf, does its whole part: the
// producer schedules and reads its rejections and duplicates, the bridge stores and fires, the
// consumer receives and acks (the record becomes SUCCESS), the operator uses the task API and
// reads the bucket; none of them is refused anything on the way. Then every forbidden action
// named there is refused by the server with a permissions violation.
func TestRolePermissions(t *testing.T) {
	srv, pw := authServer(t)
	url := srv.ClientURL()

	admin := connectAs(t, url, "admin", pw["admin"], "")
	adminJS, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}

	// The bridge, on a connection as user bridge.
	br := connectAs(t, url, "bridge", pw["bridge"], "")
	brJS, err := jetstream.New(br.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brStore, err := kvstore.OpenJetStore(ctx, brJS, kvstore.Config{})
	if err != nil {
		t.Fatalf("bridge opens the bucket: %v", err)
	}
	b, err := bridge.New(br.nc, brStore, bridge.Config{ReplicaID: "r1", ReconcileInterval: 100 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatalf("bridge start: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := b.Stop(sctx); err != nil {
			t.Errorf("stop bridge: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("bridge not ready")
	}
	// The admin's view of the bucket, to check records.
	records, err := kvstore.OpenJetStore(ctx, adminJS, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	status := func(id string) kvstore.Status {
		e, err := records.Get(ctx, id)
		if err != nil {
			return "error: " + kvstore.Status(err.Error())
		}
		return e.Task.Status
	}
	waitStatus := func(id string, want kvstore.Status) {
		t.Helper()
		if !checkFor(10*time.Second, func() bool { return status(id) == want }) {
			t.Fatalf("task %s: status %s, want %s", id, status(id), want)
		}
	}

	// The consumer of order: a queue subscription, acks with AckSync (a request: its reply
	// comes to the consumer's inbox).
	cons := connectAs(t, url, "consumer", pw["consumer"], "_INBOX_consumer")
	acked := make(chan string, 10)
	if _, err := cons.nc.QueueSubscribe("ax.fire.order", "order-workers", func(m *nats.Msg) {
		if err := m.AckSync(); err != nil {
			t.Errorf("consumer AckSync: %v", err)
		}
		acked <- m.Header.Get(bridge.HeaderTaskID)
	}); err != nil {
		t.Fatal(err)
	}
	if err := cons.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The producer of order: schedules through JetStream (the publish ack comes to its inbox)
	// and reads its rejections and duplicates.
	prod := connectAs(t, url, "producer", pw["producer"], "_INBOX_producer")
	prodJS, err := jetstream.New(prod.nc)
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := prod.nc.SubscribeSync("ax.rejected.order")
	if err != nil {
		t.Fatal(err)
	}
	duplicate, err := prod.nc.SubscribeSync("ax.duplicate.order")
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(id, delay string) {
		t.Helper()
		m := nats.NewMsg("ax.schedule.order")
		m.Header.Set(bridge.HeaderTaskID, id)
		m.Header.Set(bridge.HeaderDelay, delay)
		m.Data = []byte(`{"order":"` + id + `"}`)
		if _, err := prodJS.PublishMsg(ctx, m); err != nil {
			t.Fatalf("producer schedules %s: %v", id, err)
		}
	}

	schedule("order-1", "50ms")
	select {
	case id := <-acked:
		if id != "order-1" {
			t.Fatalf("consumer got %q, want order-1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("order-1 not fired to the consumer")
	}
	waitStatus("order-1", kvstore.StatusSuccess)

	// A task stored by another replica's intake reaches this bridge through its watch, due
	// beyond the pre-read window: the bridge reads it back in a batch before it fires it.
	now := time.Now()
	if _, err := records.Create(ctx, &kvstore.Task{ID: "order-w", BizType: "order", Payload: []byte("w"),
		Status: kvstore.StatusWaiting, DueAt: now.Add(2500 * time.Millisecond).UnixMilli(), MaxRetry: 3, AckWait: 30 * time.Second,
		Backoff: kvstore.DefaultBackoff(), CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-acked:
		if id != "order-w" {
			t.Fatalf("consumer got %q, want order-w", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("order-w not fired to the consumer")
	}
	waitStatus("order-w", kvstore.StatusSuccess)

	schedule("order-1", "50ms") // the same again: a duplicate
	if m, err := duplicate.NextMsg(10 * time.Second); err != nil || m.Header.Get(bridge.HeaderTaskID) != "order-1" {
		t.Fatalf("producer reads its duplicate: %v %v", m, err)
	}
	schedule("order-bad", "soon")
	if m, err := rejected.NextMsg(10 * time.Second); err != nil || m.Header.Get(bridge.HeaderErrorCode) != "BAD_DELAY" {
		t.Fatalf("producer reads its rejection: %v %v", m, err)
	}

	// The operator: the task API, the bucket, and the service's discovery (nats micro info).
	op := connectAs(t, url, "operator", pw["operator"], "_INBOX_operator")
	schedule("order-2", "1h")
	waitStatus("order-2", kvstore.StatusWaiting)
	api := func(subject, id string) string {
		t.Helper()
		m, err := op.nc.Request(subject, []byte(id), 5*time.Second)
		if err != nil {
			t.Fatalf("operator %s %s: %v", subject, id, err)
		}
		var task struct{ Status string }
		if err := json.Unmarshal(m.Data, &task); err != nil {
			t.Fatalf("operator %s %s: %v in %q", subject, id, err, m.Data)
		}
		return task.Status
	}
	if got := api(bridge.APIGet, "order-2"); got != "WAITING" {
		t.Fatalf("operator get order-2: %s", got)
	}
	checkOperatorCensus(t, op, br.nc)
	if got := api(bridge.APICancel, "order-2"); got != "CANCELLED" {
		t.Fatalf("operator cancel order-2: %s", got)
	}
	// The settings API: the bridge writes the settings bucket and watches it.
	if m, err := op.nc.Request(bridge.APIBizSet, []byte(`{"biz_type":"order","max_in_flight":50}`), 5*time.Second); err != nil ||
		m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), `"max_in_flight":50`) {
		t.Fatalf("operator biz.set: %v %v %q", err, m.Header, m.Data)
	}
	if !checkFor(5*time.Second, func() bool {
		m, err := op.nc.Request(bridge.APIBizList, nil, 5*time.Second)
		return err == nil && strings.Contains(string(m.Data), `"max_in_flight":50`)
	}) {
		t.Fatal("operator biz.list does not show the setting: the bridge's watch of the settings bucket")
	}
	opJS, err := jetstream.New(op.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := opJS.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatalf("operator opens the bucket: %v", err)
	}
	entry, err := kv.Get(ctx, kvstore.Key("order-2", kvstore.DefaultPartitions))
	if err != nil || !strings.Contains(string(entry.Value()), `"CANCELLED"`) {
		t.Fatalf("operator reads order-2 from the bucket: %v %q", err, entryValue(entry))
	}
	if _, err := kv.GetRevision(ctx, entry.Key(), entry.Revision()); err != nil { // nats kv get --revision
		t.Fatalf("operator reads a revision of order-2: %v", err)
	}
	if m, err := op.nc.Request("$SRV.PING", nil, 5*time.Second); err != nil || !strings.Contains(string(m.Data), `"axbridge"`) {
		t.Fatalf("operator service ping: %v %v", m, err)
	}
	if m, err := op.nc.Request("$SRV.INFO.axbridge", nil, 5*time.Second); err != nil || !strings.Contains(string(m.Data), `"ax.api.task.get"`) {
		t.Fatalf("operator service info: %v %v", m, err)
	}

	// The bridge, as housekeeper, purges the intake stream of what it has acked.
	if !checkFor(30*time.Second, func() bool {
		s, err := adminJS.Stream(ctx, "AX_SCHEDULE")
		return err == nil && s.CachedInfo().State.Msgs == 0
	}) {
		t.Fatal("the bridge did not purge the intake stream of the schedules it stored")
	}

	// The ack log the bridge created keeps the consumer's acks, and the bridge reads it as the
	// end of a lease does.
	acks, err := brJS.Stream(ctx, "AX_ACKS")
	if err != nil {
		t.Fatalf("bridge looks up the ack log: %v", err)
	}
	if m, err := acks.GetLastMsgForSubject(ctx, "ax.ack.order.>"); err != nil {
		t.Fatalf("bridge reads the ack log: %v", err)
	} else if !strings.HasPrefix(m.Subject, "ax.ack.order.") {
		t.Fatalf("the ack log's last order reply is on %q", m.Subject)
	}

	// Forbidden, each on a connection of its own so that the ones above stay clean.

	// A producer of order publishing to another bizType.
	prodBad := connectAs(t, url, "producer", pw["producer"], "_INBOX_producer")
	if err := prodBad.nc.Publish("ax.schedule.coupon", []byte("x")); err != nil {
		t.Fatal(err)
	}
	prodBad.refused(t, "ax.schedule.coupon")
	prodBadJS, _ := jetstream.New(prodBad.nc)
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	if _, err := prodBadJS.Publish(pctx, "ax.schedule.coupon", []byte("x")); err == nil {
		t.Error("producer of order: a JetStream publish to ax.schedule.coupon succeeded")
	}
	pcancel()
	prodBad.refused(t, "ax.schedule.coupon")

	// A consumer of order acking a coupon task, on the reply subject of the coupon fire (which a
	// coupon consumer, here the admin, holds).
	couponFires, err := admin.nc.SubscribeSync("ax.fire.coupon")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cm := nats.NewMsg("ax.schedule.coupon")
	cm.Header.Set(bridge.HeaderTaskID, "coupon-1")
	if _, err := adminJS.PublishMsg(ctx, cm); err != nil {
		t.Fatal(err)
	}
	fire, err := couponFires.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fire.Reply, "ax.ack.coupon.") {
		t.Fatalf("coupon fire's reply subject %q", fire.Reply)
	}
	consBad := connectAs(t, url, "consumer", pw["consumer"], "_INBOX_consumer")
	if err := consBad.nc.Publish(fire.Reply, []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	consBad.refused(t, fire.Reply)
	if err := consBad.nc.PublishRequest(fire.Reply, consBad.nc.NewInbox(), []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	consBad.refused(t, fire.Reply)
	if got := status("coupon-1"); got != kvstore.StatusRunning {
		t.Fatalf("coupon-1 after the order consumer's ack: %s, want RUNNING (the ack not applied)", got)
	}
	// The reply subject was a working one: the coupon consumer's own ack settles the task.
	if err := fire.AckSync(); err != nil {
		t.Fatal(err)
	}
	waitStatus("coupon-1", kvstore.StatusSuccess)

	// A consumer writing or reading the bucket, through JetStream and directly.
	key := kvstore.Key("order-1", kvstore.DefaultPartitions)
	if err := consBad.nc.Publish("$KV.AX_TASKS."+key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	consBad.refused(t, "$KV.AX_TASKS."+key)
	consJS, _ := jetstream.New(consBad.nc)
	kctx, kcancel := context.WithTimeout(ctx, time.Second)
	if _, err := consJS.KeyValue(kctx, kvstore.DefaultBucket); err == nil {
		t.Error("consumer opened the bucket")
	}
	kcancel()
	consBad.refused(t, "$JS.API.STREAM.INFO.KV_AX_TASKS")
	if _, err := consBad.nc.Request("$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS."+key, nil, time.Second); err == nil {
		t.Error("consumer read a record with a direct get")
	}
	consBad.refused(t, "$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS."+key)
	if _, err := consBad.nc.Request("$JS.API.STREAM.MSG.GET.KV_AX_TASKS", []byte(`{"last_by_subj":"$KV.AX_TASKS.`+key+`"}`), time.Second); err == nil {
		t.Error("consumer read a record with a message get")
	}
	consBad.refused(t, "$JS.API.STREAM.MSG.GET.KV_AX_TASKS")
	if got := status("order-1"); got != kvstore.StatusSuccess {
		t.Errorf("order-1 after the consumer's write: %s", got)
	}

	// A consumer of order subscribing to another bizType's fires.
	if _, err := consBad.nc.Subscribe("ax.fire.coupon", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	consBad.refused(t, "ax.fire.coupon")

	// The bridge subscribing to the fires, which are the consumers'.
	brBad := connectAs(t, url, "bridge", pw["bridge"], "")
	if _, err := brBad.nc.Subscribe("ax.fire.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	brBad.refused(t, "ax.fire.>")

	// And nothing of the roles' own work was refused.
	for user, rc := range map[string]*roleConn{"bridge": br, "producer": prod, "consumer": cons, "operator": op} {
		rc.clean(t, user)
	}
}

func entryValue(e jetstream.KeyValueEntry) string {
	if e == nil {
		return ""
	}
	return string(e.Value())
}
