package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// options are the command line, after AX_* environment variables and flags are applied.
type options struct {
	natsURL, creds, nkey, user, password, token, tlsCA, tlsCert, tlsKey string

	listen, dataDir string // embedded server (when natsURL is empty)

	prefix, bucket, stream, consumer, replicaID string
	ackLog                                      string
	ackLogMaxAge                                time.Duration
	replicas, partitions                        int
	partitionsSet                               bool // --partitions (or AX_PARTITIONS) was given
	partitionLease                              time.Duration
	maxRetry                                    int
	ackWait, retention                          time.Duration
	alarmP99, alarmOverdue                      time.Duration
	pastTolerance, maxHorizon                   time.Duration
	backoff                                     string

	leaseSkew, reconcileInterval, markerTTL time.Duration
	intakeMaxDeliver                        int
	preReadTasks, preReadBytes              int
	maxClaims                               int
	writeBatch                              int

	metricsAddr         string
	uiAddr, uiToken     string
	uiReadOnly          bool
	logFormat, logLevel string
	stopTimeout         time.Duration
}

// parseFlags reads flags, with AX_<FLAG_NAME> environment variables as defaults.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("axbridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `axbridge: the ax bridge, a delayed-task service for NATS JetStream.

With no --nats-url it runs an embedded NATS server (JetStream, store under --data-dir) and the
bridge on it. Every flag can also come from an environment variable: --ack-wait is AX_ACK_WAIT,
--nats-url is AX_NATS_URL; a flag on the command line wins. The protocol is in subjects.md.

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.natsURL, "nats-url", "", "NATS server URL(s), comma-separated; empty starts an embedded server")
	fs.StringVar(&o.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&o.nkey, "nkey", "", "NATS NKey seed file")
	fs.StringVar(&o.user, "user", "", "NATS user name (needs --password)")
	fs.StringVar(&o.password, "password", "", "NATS password (needs --user; prefer AX_PASSWORD, which ps does not show)")
	fs.StringVar(&o.token, "token", "", "NATS authentication token (prefer AX_TOKEN, which ps does not show)")
	fs.StringVar(&o.tlsCA, "tlsca", "", "TLS CA certificate file")
	fs.StringVar(&o.tlsCert, "tlscert", "", "TLS client certificate file (needs --tlskey)")
	fs.StringVar(&o.tlsKey, "tlskey", "", "TLS client key file")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4222", "embedded NATS server: client listen address")
	fs.StringVar(&o.dataDir, "data-dir", "data", "embedded NATS server: JetStream store directory")
	fs.StringVar(&o.prefix, "prefix", bridge.DefaultPrefix, "first token of every subject (<prefix>.schedule.<bizType>, <prefix>.fire.<bizType>, ...); deployments with different prefixes share an account; 1-64 of [A-Za-z0-9_-]")
	fs.StringVar(&o.bucket, "bucket", "", "KV bucket for task records; its members bucket is <bucket>_MEMBERS (default: the prefix in upper case + _TASKS, AX_TASKS)")
	fs.StringVar(&o.stream, "stream", "", "stream that captures <prefix>.schedule.> (default: the prefix in upper case + _SCHEDULE, AX_SCHEDULE)")
	fs.StringVar(&o.ackLog, "ack-log", "", "stream that keeps consumer replies on <prefix>.ack.> for --ack-log-max-age, so that an ack whose replica died before writing it still settles its attempt; \"off\" runs without one (default: the prefix in upper case + _ACKS, AX_ACKS)")
	fs.DurationVar(&o.ackLogMaxAge, "ack-log-max-age", bridge.DefaultAckLogMaxAge, "how long the ack log keeps a reply: an attempt whose lease ends later than this after its ack is retried if its replica died before writing the ack")
	fs.StringVar(&o.consumer, "consumer", "", "durable consumer shared by bridge replicas (default: the prefix + bridge, axbridge)")
	fs.StringVar(&o.replicaID, "replica-id", "", "this replica's name in the members bucket, task records and the Ax-Replica header of its fires, 1-64 of [A-Za-z0-9_-]; replicas need distinct ids, and a restarted one should keep its own (default: <host>-<8 hex>, kept in --data-dir/replica-id)")
	fs.IntVar(&o.replicas, "replicas", 1, "replicas of the bucket and stream (3 on a cluster)")
	fs.IntVar(&o.partitions, "partitions", 60, "partitions of a new bucket, fixed once it exists (an existing bucket keeps its own unless this is given); replicas divide them, so pick a number that many replica counts divide: 60 for 1-6, 10, 12, 15, 20 or 30 replicas")
	fs.DurationVar(&o.partitionLease, "partition-lease", 5*time.Second, "a replica that stops heartbeating loses its partitions to the others after this long (use the same on every replica)")
	fs.IntVar(&o.maxRetry, "max-retry", kvstore.DefaultMaxRetry, "default retries after the first attempt (Ax-Max-Retry)")
	fs.DurationVar(&o.ackWait, "ack-wait", kvstore.DefaultAckWait, "default time an attempt may run before it counts as failed (Ax-Ack-Wait)")
	fs.StringVar(&o.backoff, "backoff", formatBackoff(kvstore.DefaultBackoff()), "default waits before retry 1, 2, ... (durations or ms, comma-separated); the last repeats (Ax-Backoff)")
	fs.DurationVar(&o.retention, "retention", 24*time.Hour, "how long finished records stay readable (the server TTL of their final write)")
	fs.DurationVar(&o.pastTolerance, "past-tolerance", time.Hour, "due times further in the past are rejected; closer ones fire at once")
	fs.DurationVar(&o.maxHorizon, "max-horizon", 400*24*time.Hour, "due times further in the future are rejected")
	fs.DurationVar(&o.leaseSkew, "lease-skew", time.Second, "another replica expires an attempt's lease this long after its end, for clock skew between bridges")
	fs.DurationVar(&o.reconcileInterval, "reconcile-interval", time.Minute, "how often the bucket is compared with the index, to fire or repair what it missed")
	fs.DurationVar(&o.markerTTL, "marker-ttl", kvstore.DefaultMarkerTTL, "how long the delete marker of a retired record stays (set when the bucket is created or gains TTLs)")
	fs.IntVar(&o.intakeMaxDeliver, "intake-max-deliver", 20, "deliveries of a schedule message while the store keeps failing, before it is refused with STORE_UNAVAILABLE")
	fs.IntVar(&o.preReadTasks, "preread-max-tasks", 100_000, "at most this many due-soon records are held with their payloads (more are read when they fire)")
	fs.IntVar(&o.maxClaims, "max-claims", bridge.DefaultMaxClaims, "at most this many fires claimed and not yet out (a quarter of it while loading, offline or behind); the rest wait in the index, where no lease runs")
	fs.IntVar(&o.preReadBytes, "preread-max-bytes", 64<<20, "at most this many bytes of due-soon records are held in memory")
	o.writeBatch = kvstore.DefaultBatchMax
	fs.Var((*kvstore.BatchMaxFlag)(&o.writeBatch), "write-batch", "the most store writes (claims, acks, creates) in one atomic batch publish, 1-1000 (default 1000); 1 sends each on its own. Writes go out on their own while the store keeps up, and those that queue behind an unanswered send go out together (group commit)")
	fs.DurationVar(&o.alarmP99, "alarm-p99", bridge.DefaultAlarmP99, "lateness alarm: when a bizType's p99 lateness over the last minute passes this, ax.alarm.<bizType> says firing (and resolved once it stays under for a minute); a bizType's alarm_p99 setting wins; negative: no alarm")
	fs.DurationVar(&o.alarmOverdue, "alarm-overdue", bridge.DefaultAlarmOverdue, "overdue alarm: when a task of a bizType (not paused) has waited this long past its due time without a fire, ax.alarm.<bizType> says firing (alarm overdue), and resolved once none has for a minute; negative: no alarm")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9464", "serve Prometheus metrics on http://<addr>/metrics; empty disables")
	fs.StringVar(&o.uiAddr, "ui-addr", "", "serve the status page on http://<addr>/ (such as 127.0.0.1:8080); empty: no page")
	fs.StringVar(&o.uiToken, "ui-token", "", "the status page asks for this as its password (HTTP basic auth, any user name) or bearer token; needed when --ui-addr is beyond loopback (prefer AX_UI_TOKEN)")
	fs.BoolVar(&o.uiReadOnly, "ui-read-only", false, "the status page shows, and changes nothing (no requeue)")
	fs.StringVar(&o.logFormat, "log-format", "auto", "log format: auto (colour on a terminal, JSON otherwise), text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 30*time.Second, "how long a graceful stop may take")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "AX_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { o.partitionsSet = o.partitionsSet || f.Name == "partitions" })
	if err := bridge.CheckPrefix(o.prefix); err != nil {
		return o, fmt.Errorf("--prefix: %w", err)
	}
	o.bucket = cmp.Or(o.bucket, strings.ToUpper(o.prefix)+"_TASKS")
	o.stream = cmp.Or(o.stream, strings.ToUpper(o.prefix)+"_SCHEDULE")
	o.consumer = cmp.Or(o.consumer, o.prefix+"bridge")
	return o, nil
}

// formatBackoff writes a backoff list as --backoff and Ax-Backoff take it.
func formatBackoff(b []time.Duration) string {
	parts := make([]string, len(b))
	for i, d := range b {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}
