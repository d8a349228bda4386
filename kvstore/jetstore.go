package kvstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/retry"
)

// Defaults for Config.
const (
	DefaultBucket      = "AX_TASKS"
	DefaultPartitions  = 60
	DefaultTimeout     = 5 * time.Second
	DefaultRetention   = 24 * time.Hour
	DefaultMarkerTTL   = 15 * time.Minute
	DefaultWatchBuffer = 4096
	DefaultBatchMax    = maxBatchSize
	// DefaultAnswerTimeout is six times the bridge's deadline of a store call.
	DefaultAnswerTimeout = 30 * time.Second
)

// MetaPartitions is the bucket metadata key that records the partition count.
const MetaPartitions = "ax.partitions"

// maxPartitions bounds Config.Partitions: each watched partition is one consumer filter subject.
const maxPartitions = 4096

// ErrClosed: an async operation was started after Close.
var ErrClosed = errors.New("kvstore: store closed")

// Config configures a JetStore.
type Config struct {
	// Bucket is the KV bucket name (default "AX_TASKS").
	Bucket string
	// Partitions is the partition count. It is fixed when the bucket is created and recorded in
	// the bucket metadata under MetaPartitions; opening an existing bucket with another count fails
	// with an error wrapping ErrPartitions. Zero means the existing bucket's own count, or
	// DefaultPartitions (60, which 1–6, 10, 12, 15, 20 and 30 replicas divide evenly) for a new one.
	Partitions int
	// Replicas is the bucket's replica count when it is created (default 1; use 3 on a cluster).
	// An existing bucket keeps its own.
	Replicas int
	// Timeout bounds each operation whose context has no deadline (default 5s), the start of a
	// watch included.
	Timeout time.Duration
	// Retention is how long a finished record (SUCCESS, DEAD, CANCELLED) stays after its final
	// write (default 24h, at least 1s; the server counts whole seconds). Every write of a final
	// record carries it as the message's Nats-TTL; the server then removes the record and leaves
	// a delete marker. WAITING and RUNNING records carry no TTL.
	Retention time.Duration
	// MarkerTTL is how long a delete marker stays (default 15m, at least 1s): the marker the
	// server leaves when a record's TTL runs out, and the purge marker Delete writes. It is the
	// bucket's LimitMarkerTTL when the store creates the bucket, and is added to an existing
	// bucket that has none; a bucket that has one keeps its own for the server's markers.
	MarkerTTL time.Duration
	// WatchBuffer is how many events a watcher holds for a reader that is behind (default 4096).
	// When it is full the watcher stops taking messages from the server, and the server stops
	// sending (the ordered consumer's flow control) until the reader catches up.
	WatchBuffer int
	// BatchMax is the most async writes (CreateAsync, UpdateAsync, DeleteAsync) grouped into one
	// atomic batch publish (default and most 1000, the server's limit); 1 sends each write on its
	// own, pipelined. Grouping is group commit (jetstore_group.go): a write goes out at once on
	// its own while the store has room in flight, and the writes that queue behind the sends in
	// flight go out together when one is answered, so an idle store writes singles and a busy one
	// batches, whatever the server's sync setting or replication. It needs a server that allows
	// atomic publish (2.12+): unless BatchMax is 1, OpenJetStore turns AllowAtomicPublish on for
	// the bucket's stream, and if the server refuses, logs it once and sends each write on its
	// own. See bench/README.md.
	BatchMax int
	// AnswerTimeout is the longest an async write's answer is awaited (default 30s, at least the
	// deadlines callers give): nats.go then forgets the write. An answer the server never sends (a
	// stream leader that stepped down drops what it had queued) would otherwise hold one of
	// nats.go's pending slots, and the write's message, for good; once they are all held, every
	// async write stalls.
	AnswerTimeout time.Duration
	// Logger receives the store's few logs (default: discard).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Bucket = cmp.Or(c.Bucket, DefaultBucket)
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MarkerTTL = cmp.Or(c.MarkerTTL, DefaultMarkerTTL)
	c.WatchBuffer = cmp.Or(c.WatchBuffer, DefaultWatchBuffer)
	c.BatchMax = cmp.Or(c.BatchMax, DefaultBatchMax)
	c.AnswerTimeout = cmp.Or(c.AnswerTimeout, DefaultAnswerTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > maxPartitions:
		return fmt.Errorf("kvstore: partitions %d out of range 1..%d", c.Partitions, maxPartitions)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("kvstore: replicas %d out of range 1..5", c.Replicas)
	case c.Timeout < 0:
		return fmt.Errorf("kvstore: negative timeout %v", c.Timeout)
	case c.AnswerTimeout < 0:
		return fmt.Errorf("kvstore: negative answer timeout %v", c.AnswerTimeout)
	case c.Retention < time.Second:
		return fmt.Errorf("kvstore: retention %v: want at least 1s", c.Retention)
	case c.MarkerTTL < time.Second:
		return fmt.Errorf("kvstore: marker TTL %v: want at least 1s", c.MarkerTTL)
	case c.WatchBuffer < 1:
		return fmt.Errorf("kvstore: watch buffer %d: want at least 1", c.WatchBuffer)
	case c.BatchMax < 0 || c.BatchMax > maxBatchSize:
		return fmt.Errorf("kvstore: batch max %d out of range 1..%d", c.BatchMax, maxBatchSize)
	}
	return nil
}

// JetStore is the Store on a JetStream KV bucket. It is safe for concurrent use.
type JetStore struct {
	js     jetstream.JetStream
	pub    jetstream.JetStream // js's connection and API, with cfg.AnswerTimeout: async writes
	kv     jetstream.KeyValue
	cfg    Config
	prefix string // subject prefix of the bucket's keys: "$KV.<bucket>."
	msgGet string // stream message get API subject of the bucket's stream (leaderLast)
	// Nats-TTL values: of final records (cfg.Retention), and of Delete's purge markers
	// (cfg.MarkerTTL).
	retentionTTL, markerTTL string
	// testHookTarget, if set, runs in Watch between reading the leader's last revision and
	// creating the consumer.
	testHookTarget func()
	// testLoad, if not 0, overrides headersOnly for tests: above 0 headers-only, below whole.
	testLoad int8

	// Async completion (jetstore_async.go). mu guards the fields below it.
	mu      sync.Mutex
	queue   []*asyncOp // ops whose outcome is pending, FIFO; written by submit, read by waiters
	waiters int        // running waiter goroutines, at most maxWaiters
	closed  bool
	ops     sync.WaitGroup // async ops started and not yet completed
	singles atomic.Uint64  // writes sent on their own (WriteStats)
	group   *grouper       // nil: no grouping (jetstore_group.go)
}

// OpenJetStore opens the task bucket, creating it if absent, and checks that its partition count
// is cfg.Partitions. The one change it makes to an existing bucket is to allow per-message TTLs
// and delete markers with a TTL (LimitMarkerTTL = cfg.MarkerTTL) if the bucket has neither, as
// buckets created before retention by TTL do; everything else stays as it is. If the server
// refuses that update, OpenJetStore fails.
func OpenJetStore(ctx context.Context, js jetstream.JetStream, cfg Config) (*JetStore, error) {
	adopt := cfg.Partitions == 0 // an existing bucket's count is the one
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, cfg.Timeout)
	defer cancel()

	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Create, not CreateOrUpdate: an update could clobber the metadata of a bucket another
		// replica created a moment ago. Creating with an identical config is idempotent on the
		// server; a different one (say another partition count) fails, and we open and check.
		kv, err = js.CreateKeyValue(ctx, bucketConfig(cfg))
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: open bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s status: %w", cfg.Bucket, err)
	}
	meta := st.Metadata()
	n, err := strconv.Atoi(meta[MetaPartitions])
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s has no valid %q metadata (%q); it was not created by ax bridge",
			ErrPartitions, cfg.Bucket, MetaPartitions, meta[MetaPartitions])
	}
	if adopt && n > 0 && n <= maxPartitions {
		cfg.Partitions = n
	}
	if n != cfg.Partitions {
		return nil, fmt.Errorf("%w: bucket %s was created with %d partitions, configured %d",
			ErrPartitions, cfg.Bucket, n, cfg.Partitions)
	}
	sc, err := allowTTLs(ctx, js, st, cfg)
	if err != nil {
		return nil, err
	}
	pub, err := withAnswerTimeout(js, cfg.AnswerTimeout)
	if err != nil {
		return nil, err
	}
	s := &JetStore{js: js, pub: pub, kv: kv, cfg: cfg, prefix: "$KV." + cfg.Bucket + ".",
		msgGet:       apiPrefix(js.Options()) + "STREAM.MSG.GET.KV_" + cfg.Bucket,
		retentionTTL: cfg.Retention.String(), markerTTL: cfg.MarkerTTL.String()}
	if cfg.BatchMax != 1 && allowAtomic(ctx, js, sc, cfg) {
		s.group = newGrouper(s, cfg.BatchMax)
	}
	return s, nil
}

// allowAtomic makes the bucket's stream take atomic batch publishes, if it does not yet: a stream
// update of AllowAtomicPublish alone. If the server refuses it (or, older than 2.12, ignores it),
// it logs that once and reports false: the store then sends each write on its own.
func allowAtomic(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg Config) bool {
	if sc.AllowAtomicPublish {
		return true
	}
	sc.AllowAtomicPublish = true
	stream, err := js.UpdateStream(ctx, sc)
	if err == nil && !stream.CachedInfo().Config.AllowAtomicPublish {
		err = errors.New("the server ignored AllowAtomicPublish (older than 2.12?)")
	}
	if err != nil {
		cfg.Logger.Warn("kvstore: writes go out one by one: the bucket's stream does not allow atomic batch publish",
			"bucket", cfg.Bucket, "stream", sc.Name, "error", err)
		return false
	}
	return true
}

// allowTTLs makes the bucket's stream take per-message TTLs and leave delete markers that expire,
// if it does not yet: a stream update of AllowMsgTTL and SubjectDeleteMarkerTTL alone. It returns
// the stream's config as it then is.
func allowTTLs(ctx context.Context, js jetstream.JetStream, st jetstream.KeyValueStatus, cfg Config) (jetstream.StreamConfig, error) {
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return jetstream.StreamConfig{}, fmt.Errorf("kvstore: bucket %s: unexpected status type %T", cfg.Bucket, st)
	}
	sc := bs.StreamInfo().Config
	if sc.AllowMsgTTL && sc.SubjectDeleteMarkerTTL > 0 {
		return sc, nil
	}
	sc.AllowMsgTTL = true
	if sc.SubjectDeleteMarkerTTL <= 0 {
		sc.SubjectDeleteMarkerTTL = cfg.MarkerTTL
	}
	stream, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return sc, fmt.Errorf("kvstore: bucket %s has no per-message TTLs and the server refused to allow them "+
			"(stream %s update: AllowMsgTTL, SubjectDeleteMarkerTTL %v): %w", cfg.Bucket, sc.Name, sc.SubjectDeleteMarkerTTL, err)
	}
	return stream.CachedInfo().Config, nil
}

// withAnswerTimeout is a JetStream context on js's connection and API (domain or prefix) whose
// async publishes are forgotten after d without an answer.
func withAnswerTimeout(js jetstream.JetStream, d time.Duration) (jetstream.JetStream, error) {
	o, opt := js.Options(), jetstream.WithPublishAsyncTimeout(d)
	var (
		pub jetstream.JetStream
		err error
	)
	switch {
	case o.Domain != "":
		pub, err = jetstream.NewWithDomain(js.Conn(), o.Domain, opt)
	case o.APIPrefix != "":
		pub, err = jetstream.NewWithAPIPrefix(js.Conn(), o.APIPrefix, opt)
	default:
		pub, err = jetstream.New(js.Conn(), opt)
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: jetstream context for writes: %w", err)
	}
	return pub, nil
}

// apiPrefix is the JetStream API prefix js sends its requests under, derived as nats.go does
// (which keeps it private): "$JS.<domain>.API." with a domain, else APIPrefix ending in a dot,
// else "$JS.API.".
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "" && !strings.HasSuffix(o.APIPrefix, "."):
		return o.APIPrefix + "."
	}
	return cmp.Or(o.APIPrefix, jetstream.DefaultAPIPrefix)
}

// bucketConfig is the bucket a new JetStore creates; doc.go explains each setting.
func bucketConfig(cfg Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: cfg.Bucket,
		Description: fmt.Sprintf("ax bridge delayed-task records: one key per task, p<partition>.<task id>, %d partitions",
			cfg.Partitions),
		History:        1,
		TTL:            0,
		LimitMarkerTTL: cfg.MarkerTTL,
		Storage:        jetstream.FileStorage,
		Replicas:       cfg.Replicas,
		Metadata:       map[string]string{MetaPartitions: strconv.Itoa(cfg.Partitions)},
	}
}

// Partitions is the bucket's partition count.
func (s *JetStore) Partitions() int { return s.cfg.Partitions }

// Bucket is the bucket name.
func (s *JetStore) Bucket() string { return s.cfg.Bucket }

// Retention is how long a finished record stays after its final write (Config.Retention).
func (s *JetStore) Retention() time.Duration { return s.cfg.Retention }

// Create stores t under Key(t.ID) if no record is there (a deleted one counts as none).
func (s *JetStore) Create(ctx context.Context, t *Task) (Entry, error) {
	key, val, err := s.encode(t)
	if err != nil {
		return Entry{}, err
	}
	ctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.afterGrouped(ctx); err != nil {
		return Entry{}, fmt.Errorf("create %s: %w", t.ID, err)
	}
	return s.create(ctx, t, key, val)
}

// afterGrouped waits until the grouper (if any) has sent every async write made before, so that
// a synchronous write reaches the server after them, as it would behind single pipelined writes.
func (s *JetStore) afterGrouped(ctx context.Context) error {
	if s.group == nil {
		return nil
	}
	if err := s.group.sent(ctx); err != nil {
		return fmt.Errorf("not written: earlier async writes still unsent: %w", err)
	}
	return nil
}

func (s *JetStore) create(ctx context.Context, t *Task, key string, val []byte) (Entry, error) {
	// On a replicated bucket the leader refuses a write with 10164 while another write to the
	// same key is proposed but not yet applied, so after a refusal the key may still read as
	// absent (or as the old delete marker). Then the create is tried again, a few times.
	busy := retry.Backoff{Policy: retry.CreateBusy}
	for {
		e, again, err := s.createOnce(ctx, t, key, val)
		if !again || !busy.Next(ctx) {
			return e, err
		}
	}
}

// createOnce makes one attempt: expect no message under the key; if the key's last message is a
// delete marker, expect that instead. (nats.go's kv.Create does the same but reads the marker with
// a direct get, which a lagging follower of a replicated bucket may answer with the record the
// marker replaced.) retry reports a conflict without a record to show for it.
func (s *JetStore) createOnce(ctx context.Context, t *Task, key string, val []byte) (e Entry, retry bool, err error) {
	ack, err := s.js.PublishMsg(ctx, s.putMsg(t, key, val, 0), waitForLeader(ctx)...)
	if err == nil {
		return Entry{Task: *t, Revision: ack.Sequence}, false, nil
	}
	if err = mapError(err); !errors.Is(err, ErrConflict) {
		return Entry{}, false, fmt.Errorf("create %s: %w", t.ID, err)
	}
	cur, err := s.leaderLast(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return Entry{}, true, fmt.Errorf("create %s: %w (no record to show)", t.ID, ErrConflict)
	case err != nil:
		return Entry{}, false, fmt.Errorf("create %s: read existing: %w", t.ID, err)
	case cur.deleted:
		ack, err := s.js.PublishMsg(ctx, s.putMsg(t, key, val, cur.seq), waitForLeader(ctx)...)
		if err != nil {
			err = mapError(err)
			return Entry{}, errors.Is(err, ErrConflict), fmt.Errorf("create %s over delete marker %d: %w", t.ID, cur.seq, err)
		}
		return Entry{Task: *t, Revision: ack.Sequence}, false, nil
	}
	e, err = decodeEntry(t.ID, cur.seq, cur.data)
	if err != nil {
		return Entry{}, false, fmt.Errorf("create %s: %w, unreadable: %w", t.ID, ErrExists, err)
	}
	return e, false, fmt.Errorf("create %s: %w at revision %d", t.ID, ErrExists, e.Revision)
}

// Get returns the current record of id.
func (s *JetStore) Get(ctx context.Context, id string) (Entry, error) {
	if err := ValidateID(id); err != nil {
		return Entry{}, err
	}
	ctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	return s.get(ctx, id, Key(id, s.cfg.Partitions))
}

func (s *JetStore) get(ctx context.Context, id, key string) (Entry, error) {
	m, err := s.leaderLast(ctx, key)
	if err == nil && m.deleted {
		err = ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("get %s: %w", id, err)
	}
	return decodeEntry(id, m.seq, m.data)
}

// leaderMsg is the last message of a key (or key filter) as the stream leader has it.
type leaderMsg struct {
	seq     uint64
	subject string
	data    []byte
	deleted bool // a delete or purge marker
}

// leaderLast reads the last message under a key or key filter with a stream message get, which
// the stream leader answers. nats.go's kv.Get uses a direct get instead, which any replica may
// answer: on a replicated bucket a follower that has not applied the latest write yet returns an
// older revision, or none (seen here right after a CAS conflict on a fresh key). ErrNotFound if
// there is no message.
func (s *JetStore) leaderLast(ctx context.Context, filter string) (leaderMsg, error) {
	return s.leaderGet(ctx, struct {
		LastBySubj string `json:"last_by_subj"`
	}{s.prefix + filter})
}

// leaderGet is a stream message get of request r (by last subject, or by sequence), which the
// stream leader answers. ErrNotFound if there is no such message.
func (s *JetStore) leaderGet(ctx context.Context, r any) (leaderMsg, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return leaderMsg{}, err
	}
	msg, err := s.js.Conn().RequestWithContext(ctx, s.msgGet, req)
	if err != nil {
		return leaderMsg{}, err
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Hdrs    []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return leaderMsg{}, fmt.Errorf("message get: %w", err)
	}
	switch {
	case resp.Error != nil:
		return leaderMsg{}, mapError(resp.Error)
	case resp.Message == nil:
		return leaderMsg{}, errors.New("message get: empty answer")
	}
	m := leaderMsg{seq: resp.Message.Seq, subject: resp.Message.Subject, data: resp.Message.Data}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return leaderMsg{}, fmt.Errorf("message get: headers: %w", err)
		}
		m.deleted = isMarker(h)
	}
	return m, nil
}

// isMarker reports whether a message with headers h is a delete or purge marker. As nats.go's
// kv.Get: an operation header, or a marker the server wrote.
func isMarker(h nats.Header) bool {
	return h.Get(hdrKVOperation) != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// Update replaces the record of t.ID if its revision is still rev.
func (s *JetStore) Update(ctx context.Context, t *Task, rev uint64) (uint64, error) {
	key, val, err := s.encode(t)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.afterGrouped(ctx); err != nil {
		return 0, fmt.Errorf("update %s at revision %d: %w", t.ID, rev, err)
	}
	ack, err := s.casPublish(ctx, s.putMsg(t, key, val, rev))
	if err != nil {
		return 0, fmt.Errorf("update %s at revision %d: %w", t.ID, rev, mapError(err))
	}
	return ack.Sequence, nil
}

// Delete removes the record of id if its revision is still rev. It writes a purge marker that
// expires after Config.MarkerTTL (see the package documentation).
func (s *JetStore) Delete(ctx context.Context, id string, rev uint64) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.afterGrouped(ctx); err != nil {
		return fmt.Errorf("delete %s at revision %d: %w", id, rev, err)
	}
	if _, err := s.casPublish(ctx, s.purgeMsg(Key(id, s.cfg.Partitions), rev)); err != nil {
		return fmt.Errorf("delete %s at revision %d: %w", id, rev, mapError(err))
	}
	return nil
}

// Header names and values of the KV protocol, as nats.go writes them.
const (
	hdrKVOperation = "KV-Operation"
	kvOpPurge      = "PURGE"
)

// putMsg is a put of t's encoding val under key that the server accepts only if the key's last
// message has sequence rev (0: the key has no message at all). A final record carries the
// retention as its TTL. A record of at least recordHeaderMin bytes carries its metadata line a
// second time, as the header HdrRecord, so that a headers-only watch (Watch's initial load) has
// the record's whole state without its payload.
func (s *JetStore) putMsg(t *Task, key string, val []byte, rev uint64) *nats.Msg {
	m := nats.NewMsg(s.prefix + key)
	m.Data = val
	if meta := metaLine(val); len(val) >= recordHeaderMin && len(meta) <= recordHeaderMax {
		m.Header.Set(HdrRecord, string(meta))
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if t.Status.Final() {
		m.Header.Set(jetstream.MsgTTLHeader, s.retentionTTL)
	}
	return m
}

// purgeMsg is a purge marker for key (a rollup that removes the key's earlier messages), accepted
// only if the key's last message has sequence rev, that the server removes after the marker TTL.
func (s *JetStore) purgeMsg(key string, rev uint64) *nats.Msg {
	m := nats.NewMsg(s.prefix + key)
	m.Header.Set(hdrKVOperation, kvOpPurge)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	m.Header.Set(jetstream.MsgTTLHeader, s.markerTTL)
	return m
}

func (s *JetStore) encode(t *Task) (key string, val []byte, err error) {
	if t == nil {
		return "", nil, fmt.Errorf("%w: nil task", ErrInvalidTask)
	}
	if err := ValidateID(t.ID); err != nil {
		return "", nil, err
	}
	val, err = EncodeTask(t)
	if err != nil {
		return "", nil, err
	}
	return Key(t.ID, s.cfg.Partitions), val, nil
}

// mapError translates nats.go errors into this package's sentinels. With keyBusy it is the only
// place that knows JetStream error codes: a CAS conflict is "wrong last sequence", code 10071, and
// 10164 (JSStreamWrongLastSequenceConstantErr), which a replicated stream's leader sends without
// comparing while the key is busy (Update and Delete ask again on it, see keyBusy; Create settles
// it by reading); nats.go reports it as
// ErrKeyExists (matched by code 10071 only), as ErrKeyRevisionMismatch (kv.Update, kv.Delete) or
// as a bare *APIError (publishes, sync or async). Other errors pass through.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch),
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted),
		errors.Is(err, jetstream.ErrMsgNotFound):
		return ErrNotFound
	}
	return err
}

// decodeEntry decodes a stored value of task id at rev; the error wraps ErrCorrupt or
// ErrUnknownVersion. The payload is part of val, which the caller hands over for good (a message
// nats.go allocated for it, or a copy): the watch's initial load copies no payloads.
func decodeEntry(id string, rev uint64, val []byte) (Entry, error) {
	t, err := decodeTask(val)
	if err != nil {
		return Entry{}, fmt.Errorf("task %s revision %d: %w", id, rev, err)
	}
	if t.ID != id {
		return Entry{}, fmt.Errorf("task %s revision %d: %w: the record names task %q", id, rev, ErrCorrupt, t.ID)
	}
	return Entry{Task: t, Revision: rev}, nil
}

// errKeyBusy: a CAS write was refused until its deadline because the stream leader still had
// another write to the key in process. The write was not stored; it is not a conflict.
var errKeyBusy = errors.New("kvstore: not written: the stream leader still had another write to the key in process")

// keyBusy reports the stream leader's answer to a CAS write on a replicated bucket while another
// write to the same key is proposed but not yet applied on the leader: code 10164
// (JSStreamWrongLastSequenceConstantErr), sent without comparing revisions (nats-server
// checkMsgHeadersPreClusteredProposal, expectedPerSubjectInProcess). The write in process may be
// the very one that made the expected revision current: a follower applies it, and delivers it to
// a watch or answers a direct get with it, before the leader has applied it. So the refusal says
// "busy, ask again", not "the record is at another revision".
func keyBusy(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// casPublish publishes a write that carries an expected last subject sequence and, while the
// leader refuses it because the key is busy (keyBusy: nothing was stored), sends it again a
// little later, until the leader compares revisions (success, or a conflict with code 10071) or
// ctx ends (errKeyBusy, not a conflict).
func (s *JetStore) casPublish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	busy := retry.Backoff{Policy: retry.Busy}
	for {
		ack, err := s.js.PublishMsg(ctx, m, waitForLeader(ctx)...)
		if !keyBusy(err) {
			return ack, err
		}
		if !busy.Next(ctx) {
			return nil, fmt.Errorf("%w: %w", errKeyBusy, ctx.Err())
		}
	}
}

// waitForLeader makes a publish ride out a stream with no leader, as while a replicated bucket
// elects one (just created, or after its leader left): JetStream then answers "no responders",
// which means no server took the message, so sending it again is safe. nats.go retries twice,
// 250ms apart, by default; this retries at retry.NoLeader's pace until ctx's deadline.
func waitForLeader(ctx context.Context) []jetstream.PublishOpt {
	n := 2
	if d, ok := ctx.Deadline(); ok {
		n = retry.NoLeader.Within(time.Until(d))
	}
	return []jetstream.PublishOpt{jetstream.WithRetryWait(retry.NoLeader.First), jetstream.WithRetryAttempts(n)}
}

// withTimeout gives ctx the deadline now+d unless it has one already.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
