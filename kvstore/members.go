package kvstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Members is the membership bucket of bridge replicas: a small KV bucket (file storage, replicated
// like the task bucket, so that it survives a server restart) where each replica heartbeats its key "m.<replica>" with a per-message
// TTL, and where one key, created by CAS with a TTL and renewed by CAS, elects one replica for the
// work that runs once per bucket. Replicas watch the "m.*" keys to learn who is alive. It is safe
// for concurrent use.
type Members struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	cfg     MembersConfig
	prefix  string // "$KV.<bucket>."
	timeout time.Duration
}

// MembersConfig configures OpenMembers.
type MembersConfig struct {
	// Bucket is the bucket's name (default "AX_TASKS_MEMBERS": the task bucket's name plus
	// "_MEMBERS").
	Bucket string
	// Replicas is the bucket's replica count when it is created (default 1; 3 on a cluster).
	Replicas int
	// Timeout bounds each call whose context has no deadline (default 5s).
	Timeout time.Duration
	// MarkerTTL is how long the marker of a replica's leave stays (default 1m, as the markers the
	// server leaves when a heartbeat expires); then it goes, so that ids used once do not pile up.
	MarkerTTL time.Duration
}

// MemberEvent is one change of the membership: a replica's heartbeat (At is the server's time of
// it, Value what it wrote), its key deleted or expired (Deleted), or the end of the keys that
// existed when the watch started (InitDone).
type MemberEvent struct {
	ID       string
	At       time.Time
	Value    []byte
	Deleted  bool
	InitDone bool
}

// memberKeyPrefix is the key prefix of replicas' heartbeats.
const memberKeyPrefix = "m."

// OpenMembers opens the membership bucket, creating it if absent.
func OpenMembers(ctx context.Context, js jetstream.JetStream, cfg MembersConfig) (*Members, error) {
	cfg.Bucket = cmp.Or(cfg.Bucket, DefaultBucket+"_MEMBERS")
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MarkerTTL = cmp.Or(cfg.MarkerTTL, membersMarkerTTL)
	kv, err := openMembersBucket(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	return &Members{js: js, kv: kv, cfg: cfg, prefix: "$KV." + cfg.Bucket + ".", timeout: cfg.Timeout}, nil
}

func openMembersBucket(ctx context.Context, js jetstream.JetStream, cfg MembersConfig) (jetstream.KeyValue, error) {
	ctx, cancel := withTimeout(ctx, cfg.Timeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      cfg.Bucket,
			Description: "ax bridge replicas: heartbeats (m.<replica>) and the housekeeper lease",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			// Per-message TTLs (heartbeats expire on the server once they stop), and the marker the
			// server leaves when one runs out, which watchers see as a delete.
			LimitMarkerTTL: membersMarkerTTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: open members bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// ttlValue is a Nats-TTL header value: whole seconds, rounded up, at least 1s.
func ttlValue(d time.Duration) string {
	s := max(int64((d+time.Second-1)/time.Second), 1)
	return strconv.FormatInt(s, 10) + "s"
}

// Heartbeat writes value to replica's key with a TTL: the server removes it ttl after the last
// heartbeat. It returns once the write is durable. If the bucket is gone (an operator deleted it),
// it is created again.
func (m *Members) Heartbeat(ctx context.Context, replica string, value []byte, ttl time.Duration) error {
	ctx, cancel := withTimeout(ctx, m.timeout)
	defer cancel()
	msg := func() *nats.Msg {
		return &nats.Msg{
			Subject: m.prefix + memberKeyPrefix + replica,
			Header:  nats.Header{jetstream.MsgTTLHeader: []string{ttlValue(ttl)}},
			Data:    value,
		}
	}
	_, err := m.js.PublishMsg(ctx, msg())
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		if _, oerr := openMembersBucket(ctx, m.js, m.cfg); oerr == nil {
			_, err = m.js.PublishMsg(ctx, msg())
		}
	}
	if err != nil {
		return fmt.Errorf("kvstore: heartbeat %s: %w", replica, mapError(err))
	}
	return nil
}

// membersMarkerTTL is how long a marker stays in the members bucket: a leave's, and the one the
// server leaves when a heartbeat expires.
const membersMarkerTTL = time.Minute

// Leave purges replica's key, so that the others see it gone at once; the purge's marker expires
// after MarkerTTL (review N13: a plain delete's marker stayed for good, one per id ever used).
func (m *Members) Leave(ctx context.Context, replica string) error {
	ctx, cancel := withTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.kv.Purge(ctx, memberKeyPrefix+replica, jetstream.PurgeTTL(m.cfg.MarkerTTL)); err != nil {
		return fmt.Errorf("kvstore: leave %s: %w", replica, mapError(err))
	}
	return nil
}

// WatchMembers delivers the replicas' keys that exist, then an InitDone event, then every change,
// until ctx ends or the watch fails; then the channel is closed.
func (m *Members) WatchMembers(ctx context.Context) (<-chan MemberEvent, error) {
	sctx, scancel := withTimeout(ctx, m.timeout)
	defer scancel()
	wctx, cancel := context.WithCancel(ctx)
	stopBound := context.AfterFunc(sctx, cancel) // bounds the watch's creation only
	kw, err := m.kv.Watch(wctx, memberKeyPrefix+"*")
	if !stopBound() && err == nil {
		err = sctx.Err()
		go func() {
			for range kw.Updates() {
			}
		}()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kvstore: watch members: %w", mapError(err))
	}
	out := make(chan MemberEvent, 64)
	go func() {
		defer close(out)
		defer cancel()
		for e := range kw.Updates() {
			ev := MemberEvent{InitDone: true}
			if e != nil {
				id, _ := strings.CutPrefix(e.Key(), memberKeyPrefix)
				op := e.Operation()
				ev = MemberEvent{ID: id, At: e.Created(), Value: e.Value(), Deleted: op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				_ = kw.Stop()
				for range kw.Updates() {
				}
				return
			}
		}
	}()
	return out, nil
}

// Campaign creates key with holder as its value and a TTL, if the key does not exist (or its last
// holder's TTL ran out). It returns the key's revision, which Renew and Resign name; ErrConflict if
// another holder has it.
func (m *Members) Campaign(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error) {
	ctx, cancel := withTimeout(ctx, m.timeout)
	defer cancel()
	d := max((ttl+time.Second-1)/time.Second*time.Second, time.Second)
	rev, err := m.kv.Create(ctx, key, []byte(holder), jetstream.KeyTTL(d))
	if err != nil {
		return 0, fmt.Errorf("kvstore: campaign %s: %w", key, mapError(err))
	}
	return rev, nil
}

// Renew writes key again with a fresh TTL if its revision is still rev (ErrConflict otherwise)
// and returns the new revision.
func (m *Members) Renew(ctx context.Context, key, holder string, rev uint64, ttl time.Duration) (uint64, error) {
	ctx, cancel := withTimeout(ctx, m.timeout)
	defer cancel()
	ack, err := m.js.PublishMsg(ctx, &nats.Msg{
		Subject: m.prefix + key,
		Data:    []byte(holder),
		Header: nats.Header{
			jetstream.MsgTTLHeader:              []string{ttlValue(ttl)},
			jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(rev, 10)},
		},
	})
	if err != nil {
		return 0, fmt.Errorf("kvstore: renew %s: %w", key, mapError(err))
	}
	return ack.Sequence, nil
}

// Resign deletes key if its revision is still rev, so that another holder can take it at once.
func (m *Members) Resign(ctx context.Context, key string, rev uint64) error {
	ctx, cancel := withTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("kvstore: resign %s: %w", key, mapError(err))
	}
	return nil
}
