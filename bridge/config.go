package bridge

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge/internal/sched"
	"github.com/axbridge/axbridge/kvstore"
)

// DefaultMaxClaims is Config.MaxClaims when it is 0.
const DefaultMaxClaims = sched.DefaultMaxClaims

// Config configures a Bridge. Zero values take the documented defaults.
type Config struct {
	// Prefix is the first token of every subject the bridge publishes and subscribes (default
	// DefaultPrefix, "ax"): <prefix>.schedule.<bizType>, <prefix>.fire.<bizType>, <prefix>.ack...,
	// the task API <prefix>.api.task.* and its micro service <prefix>bridge. Two deployments with
	// different prefixes (and their own stream and bucket) share one account without seeing each
	// other's tasks. One subject token of 1-64 characters from [A-Za-z0-9_-].
	Prefix string
	// Stream is the JetStream stream that captures <prefix>.schedule.> (default the prefix in
	// upper case plus "_SCHEDULE": "AX_SCHEDULE"), Consumer the durable pull consumer shared by
	// all replicas (default the prefix plus "bridge": "axbridge").
	Stream   string
	Consumer string
	// StreamReplicas is the intake stream's replica count (default 1; 3 on a cluster).
	StreamReplicas int
	// ReplicaID names this bridge process in the members bucket, task records and the Ax-Replica
	// header of its fires. Replicas need distinct ids, and a restarted replica should keep its own,
	// so that its leases count as its own (cmd/axbridge derives one from the host name). Default:
	// random per process.
	ReplicaID string
	// IntakeMaxDeliver is how often a schedule message is delivered while the task store fails
	// (default 20: with retries 1s, 2s, 4s, ... 30s apart, about 8 minutes of outage). The last
	// delivery that still fails is refused with STORE_UNAVAILABLE, so that no message holds the
	// intake consumer's ack-pending window for good. (The intake consumer the bridge creates has
	// no max deliver of its own: the server never gives a message up.)
	IntakeMaxDeliver int

	// AckLog is the stream that keeps every consumer reply for AckLogMaxAge (default the prefix
	// in upper case plus "_ACKS": "AX_ACKS"; AckLogMaxAge default 2m), so that an ack that reached
	// a replica which died before writing it settles its attempt all the same (subjects.md, "The
	// ack log"). NoAckLog runs without it: such an attempt is retried after its ack wait.
	AckLog       string
	AckLogMaxAge time.Duration
	NoAckLog     bool

	// Replicas divide the bucket's partitions among the live ones (members.go).
	//
	// PartitionLease is how long a replica counts as alive after its last heartbeat (default 5s;
	// heartbeats go every quarter of it). A replica that dies or is cut off loses its partitions to
	// the others within about a lease, and stops claiming and firing itself a fifth of a lease
	// before its lease ends.
	// Replicas of one bucket should use the same lease.
	PartitionLease time.Duration
	// Members is the membership bucket. Default: Start opens (or creates) the KV bucket
	// MembersBucket on the bridge's NATS connection.
	Members Membership
	// MembersBucket names the membership bucket when Members is nil (default: the task
	// bucket's name plus "_MEMBERS"; for a store without a name, the prefix in upper case plus
	// "_TASKS_MEMBERS", "AX_TASKS_MEMBERS").
	MembersBucket string

	// Task defaults, used when a schedule message does not say.
	MaxAttempts int             // default 4 (Ax-Max-Retry 3); 1 means no retries
	AckWait     time.Duration   // default 30s
	Backoff     []time.Duration // default 10s, 30s, 60s

	// PastTolerance: due times further in the past than this are rejected (default 1h);
	// closer ones fire at once.
	PastTolerance time.Duration
	// MaxHorizon: due times further in the future than this are rejected (default 400 days).
	MaxHorizon time.Duration
	// MaxPayload caps payload plus caller headers of one task (default 960 KiB, under NATS's
	// default 1 MiB message limit with room for the record's metadata). The record's largest
	// message in any later state is checked as well, against the connection's max payload
	// (subjects.md, "Size"): what passes both is stored, what does not is refused with
	// PAYLOAD_TOO_LARGE and never retried.
	MaxPayload int
	// PreRead: tasks due within this window keep their payload in memory so that firing them
	// needs no read (default 2s). Tasks further out are indexed without payload.
	PreRead time.Duration

	// The scheduling loop.
	//
	// ClaimAhead bounds how long before its due time a task is claimed (default 100ms; negative:
	// claimed at the due time). The claim's write then lands before the task is due, and the
	// loop publishes the fire at the due time with no store round trip in between. Within the
	// bound the window follows the claims: claimAheadFactor times the p99 of the recent claim
	// writes (from the loop taking the task to the write's completion), plus a millisecond. The
	// attempt's lease counts from the due time; while it is claimed ahead the record shows
	// RUNNING, and the task API's cancel refuses it as it refuses any running task.
	ClaimAhead time.Duration
	// LeaseSkew: a replica expires a lease another replica owns only this long after its
	// LeaseUntil, so that clocks a little apart never end an attempt early (default 1s); the
	// owner expires it at LeaseUntil.
	LeaseSkew time.Duration
	// MaxPreReadTasks and MaxPreReadBytes bound the records held with their payload ahead of
	// their due time (defaults 100,000 and 64 MiB, each record counted with its payload,
	// headers and a few hundred bytes of its own); past either bound a task is indexed without
	// its payload and read when it fires.
	MaxPreReadTasks int
	MaxPreReadBytes int
	// WatchTimeout bounds each attempt to start the task watch again after it ended (default
	// 10s); attempts go on with a growing pause while the loop keeps firing from its index.
	WatchTimeout time.Duration
	// ReconcileInterval is the pause between two passes of the reconciler (default 1m), which
	// reads the bucket and repairs any task the index missed: WAITING more than ReconcileGrace
	// past due (default 2s), or RUNNING that long past its lease. A pass reads at most
	// ReconcileRate records a second (default 10,000).
	ReconcileInterval time.Duration
	ReconcileGrace    time.Duration
	ReconcileRate     int

	// Workers run claims, fires and lease checks (default 256);
	// AckWorkers apply consumer acks (default 256). Both pipeline store round trips.
	Workers    int
	AckWorkers int
	// MaxClaims bounds the fires claimed and not yet out (default DefaultMaxClaims), and a
	// quarter of it bounds them while the replica loads, is offline or behind.
	MaxClaims int

	// AlarmP99 is the lateness alarm's threshold for bizTypes whose settings give none (default
	// DefaultAlarmP99; negative: no alarm); AlarmWindow the window its p99 is taken over, and
	// that it must stay under the threshold to resolve (default DefaultAlarmWindow).
	AlarmP99    time.Duration
	AlarmWindow time.Duration
	// AlarmOverdue: the overdue alarm fires for a bizType once one of its tasks (not paused) has
	// waited this long past its due time without a fire (default DefaultAlarmOverdue; negative: no
	// alarm).
	AlarmOverdue time.Duration

	// Registerer receives the bridge's Prometheus metrics (default: none are exported).
	Registerer prometheus.Registerer

	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now). It must return readings with a monotonic component.
	Now func() time.Time

	subj subjects  // the subjects under Prefix, set by withDefaults
	biz  *bizTable // the bizType settings, set by New: the defaults of series policies
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.subj = subjectsOf(c.Prefix)
	c.Stream = cmp.Or(c.Stream, strings.ToUpper(c.Prefix)+"_SCHEDULE")
	c.Consumer = cmp.Or(c.Consumer, c.Prefix+"bridge")
	c.AckLog = cmp.Or(c.AckLog, strings.ToUpper(c.Prefix)+"_ACKS")
	c.AckLogMaxAge = cmp.Or(c.AckLogMaxAge, DefaultAckLogMaxAge)
	c.StreamReplicas = cmp.Or(c.StreamReplicas, 1)
	c.IntakeMaxDeliver = cmp.Or(c.IntakeMaxDeliver, 20)
	if c.ReplicaID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ReplicaID = "r" + hex.EncodeToString(b[:])
	}
	if c.Backoff == nil {
		c.Backoff = kvstore.DefaultBackoff()
	}
	c.MaxAttempts = cmp.Or(c.MaxAttempts, kvstore.DefaultMaxRetry+1)
	c.AckWait = cmp.Or(c.AckWait, kvstore.DefaultAckWait)
	c.PastTolerance = cmp.Or(c.PastTolerance, time.Hour)
	c.MaxHorizon = cmp.Or(c.MaxHorizon, 400*24*time.Hour)
	c.MaxPayload = cmp.Or(c.MaxPayload, 960<<10)
	c.PreRead = cmp.Or(c.PreRead, 2*time.Second)
	c.LeaseSkew = cmp.Or(c.LeaseSkew, time.Second)
	c.ClaimAhead = cmp.Or(c.ClaimAhead, defaultClaimAhead)
	c.MaxPreReadTasks = cmp.Or(c.MaxPreReadTasks, 100_000)
	c.MaxPreReadBytes = cmp.Or(c.MaxPreReadBytes, 64<<20)
	c.WatchTimeout = cmp.Or(c.WatchTimeout, 10*time.Second)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, time.Minute)
	c.ReconcileGrace = cmp.Or(c.ReconcileGrace, 2*time.Second)
	c.ReconcileRate = cmp.Or(c.ReconcileRate, 10_000)
	c.PartitionLease = cmp.Or(c.PartitionLease, 5*time.Second)
	c.AlarmP99 = cmp.Or(c.AlarmP99, DefaultAlarmP99)
	c.AlarmWindow = cmp.Or(c.AlarmWindow, DefaultAlarmWindow)
	c.AlarmOverdue = cmp.Or(c.AlarmOverdue, DefaultAlarmOverdue)
	c.Workers = cmp.Or(c.Workers, 256)
	c.AckWorkers = cmp.Or(c.AckWorkers, 256)
	c.MaxClaims = cmp.Or(c.MaxClaims, DefaultMaxClaims)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every invalid setting, after defaults are applied. New calls it too.
func (c Config) Validate() error { return c.withDefaults().validate() }
