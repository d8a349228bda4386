package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// The members bucket: heartbeats show in a watch with their values (initial load, then live), a
// leave is a delete, the lease key is taken by one holder at a time and renewed only on its
// revision, and a heartbeat after the bucket was deleted creates it again.
func TestMembers(t *testing.T) {
	t.Parallel()
	ctx, cancel, js, m := openTestMembers(t, kvstore.MembersConfig{Bucket: "T_MEMBERS"})
	defer cancel()
	if err := m.Heartbeat(ctx, "r1", []byte("one"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	events, err := m.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() kvstore.MemberEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-ctx.Done():
			t.Fatal("no member event")
			return kvstore.MemberEvent{}
		}
	}
	if ev := next(); ev.ID != "r1" || ev.Deleted || ev.At.IsZero() || string(ev.Value) != "one" {
		t.Errorf("initial: %+v, want r1's heartbeat", ev)
	}
	if ev := next(); !ev.InitDone {
		t.Errorf("after the initial keys: %+v, want InitDone", ev)
	}
	if err := m.Heartbeat(ctx, "r2", []byte("two"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.ID != "r2" || ev.Deleted || string(ev.Value) != "two" {
		t.Errorf("live: %+v, want r2's heartbeat", ev)
	}
	if err := m.Leave(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.ID != "r2" || !ev.Deleted {
		t.Errorf("after leave: %+v, want r2 deleted", ev)
	}

	rev, err := m.Campaign(ctx, "housekeeper", "r1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Campaign(ctx, "housekeeper", "r2", 5*time.Second); !errors.Is(err, kvstore.ErrConflict) {
		t.Errorf("second campaign: %v, want ErrConflict", err)
	}
	rev2, err := m.Renew(ctx, "housekeeper", "r1", rev, 5*time.Second)
	if err != nil || rev2 <= rev {
		t.Fatalf("renew: %d, %v", rev2, err)
	}
	if _, err := m.Renew(ctx, "housekeeper", "r1", rev, 5*time.Second); !errors.Is(err, kvstore.ErrConflict) {
		t.Errorf("renew on an old revision: %v, want ErrConflict", err)
	}
	if err := m.Resign(ctx, "housekeeper", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Campaign(ctx, "housekeeper", "r2", 5*time.Second); err != nil {
		t.Errorf("campaign after resign: %v", err)
	}

	if err := js.DeleteKeyValue(ctx, "T_MEMBERS"); err != nil {
		t.Fatal(err)
	}
	if err := m.Heartbeat(ctx, "r1", nil, 5*time.Second); err != nil {
		t.Fatalf("heartbeat after the bucket was deleted: %v", err)
	}
	if _, err := js.KeyValue(ctx, "T_MEMBERS"); err != nil {
		t.Errorf("bucket not created again: %v", err)
	}
	cancel()
	for range events { // closed once the watch's context ends
	}
}

// A heartbeat's key expires on the server after its TTL: watchers see it deleted.
func TestMembersHeartbeatExpires(t *testing.T) {
	t.Parallel()
	ctx, cancel, _, m := openTestMembers(t, kvstore.MembersConfig{})
	defer cancel()
	events, err := m.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Heartbeat(ctx, "gone", nil, time.Second); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-events:
			if ev.ID == "gone" && ev.Deleted {
				cancel()
				for range events {
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("the heartbeat's key did not expire")
		}
	}
}

// A replica's leave is seen as a delete at once, and its marker expires after MarkerTTL (review
// N13): the members bucket keeps nothing of an id that left.
func TestMembersLeaveMarkerExpires(t *testing.T) {
	t.Parallel()
	cfg := kvstore.MembersConfig{Bucket: "LEAVE_MEMBERS", MarkerTTL: time.Second}
	ctx, cancel, js, m := openTestMembers(t, cfg)
	defer cancel()
	events, err := m.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Heartbeat(ctx, "left", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := m.Leave(ctx, "left"); err != nil {
		t.Fatal(err)
	}
	for deleted := false; !deleted; {
		select {
		case ev := <-events:
			deleted = ev.ID == "left" && ev.Deleted
		case <-ctx.Done():
			t.Fatal("the leave was not seen as a delete")
		}
	}
	stream, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond): // poll interval of a bounded poll
		case <-ctx.Done():
			t.Fatalf("the members bucket still holds %d messages after the leave's marker TTL", info.State.Msgs)
		}
	}
}

// openTestMembers opens the members bucket of cfg on a server of its own, with a context of 30 s.
func openTestMembers(t *testing.T, cfg kvstore.MembersConfig) (context.Context, context.CancelFunc, jetstream.JetStream, *kvstore.Members) {
	t.Helper()
	srv := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	m, err := kvstore.OpenMembers(ctx, js, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return ctx, cancel, js, m
}
