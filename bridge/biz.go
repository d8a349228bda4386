package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/internal/retry"
	"github.com/axbridge/axbridge/kvstore"
)

// Per-bizType settings (subjects.md, "BizType settings"): stored in a KV bucket next to the task
// bucket (<task bucket>_BIZ, key = the bizType, value = BizSettings as JSON), changed through
// ax.api.biz.set, and watched by every replica, which applies a change within the watch's delay.

// BizSettings are one bizType's settings. A zero field bounds nothing and changes no default.
type BizSettings struct {
	BizType string `json:"biz_type"`
	// MaxInFlight bounds the attempts fired and not yet settled, across all replicas; 0: none.
	MaxInFlight int `json:"max_in_flight"`
	// Rate bounds the fires per second across all replicas, with bursts of Burst (0: one
	// second's worth, at least 1); 0: none.
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
	// Paused: nothing of the bizType fires; its tasks wait, and resume fires what came due.
	Paused bool `json:"paused"`
	// Misfire and Overlap are the defaults of its series that do not say (Ax-Misfire, Ax-Overlap).
	Misfire string `json:"misfire"`
	Overlap string `json:"overlap"`
	// AlarmP99 is the lateness alarm's threshold (a Go duration); "": the --alarm-p99 default.
	AlarmP99  string `json:"alarm_p99"`
	UpdatedAt string `json:"updated_at,omitempty"`
	Revision  uint64 `json:"revision"`
}

// bizUpdate is the body of ax.api.biz.set: the fields given replace the stored ones.
type bizUpdate struct {
	BizType     string   `json:"biz_type"`
	MaxInFlight *int     `json:"max_in_flight"`
	Rate        *float64 `json:"rate"`
	Burst       *int     `json:"burst"`
	Paused      *bool    `json:"paused"`
	Misfire     *string  `json:"misfire"`
	Overlap     *string  `json:"overlap"`
	AlarmP99    *string  `json:"alarm_p99"`
}

// maxBizBound bounds max_in_flight, rate and burst.
const maxBizBound = 1_000_000

// apply returns s with u's fields, or why they cannot be taken.
func (u *bizUpdate) apply(s BizSettings) (BizSettings, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if v := u.MaxInFlight; v != nil {
		if *v < 0 || *v > maxBizBound {
			bad("max_in_flight %d: want 0 (no bound) to %d", *v, maxBizBound)
		}
		s.MaxInFlight = *v
	}
	if v := u.Rate; v != nil {
		if *v < 0 || *v > maxBizBound || math.IsNaN(*v) {
			bad("rate %v: want 0 (no bound) to %d fires per second", *v, maxBizBound)
		}
		s.Rate = *v
	}
	if v := u.Burst; v != nil {
		if *v < 0 || *v > maxBizBound {
			bad("burst %d: want 0 (one second's worth) to %d", *v, maxBizBound)
		}
		s.Burst = *v
	}
	if u.Paused != nil {
		s.Paused = *u.Paused
	}
	if v := u.Misfire; v != nil {
		switch *v {
		case "", kvstore.MisfireFireOnce, kvstore.MisfireSkip, kvstore.MisfireFireAll:
		default:
			bad("misfire %q: want fire-once, skip or fire-all (\"\": the default, fire-once)", *v)
		}
		s.Misfire = *v
	}
	if v := u.Overlap; v != nil {
		switch *v {
		case "", kvstore.OverlapSkip, kvstore.OverlapBufferOne:
		default:
			bad("overlap %q: want skip or buffer-one (\"\": the default, skip)", *v)
		}
		s.Overlap = *v
	}
	if v := u.AlarmP99; v != nil {
		s.AlarmP99 = *v
		if d, err := parseDuration(*v); *v != "" && (err != nil || d < time.Millisecond || d > time.Hour) {
			bad("alarm_p99 %q: want a duration from 1ms to 1h (\"\": the --alarm-p99 default)", *v)
		} else if *v != "" {
			s.AlarmP99 = d.String()
		}
	}
	return s, errors.Join(errs...)
}

// burst is the burst a rate is taken with.
func (s *BizSettings) burst() int {
	if s.Burst > 0 {
		return s.Burst
	}
	return max(1, int(math.Ceil(s.Rate)))
}

// bizTable is every replica's view of the settings bucket.
type bizTable struct {
	cur     atomic.Pointer[map[string]BizSettings]
	changed chan struct{} // a change arrived (capacity 1): the loop applies it
}

func newBizTable() *bizTable {
	t := &bizTable{changed: make(chan struct{}, 1)}
	t.cur.Store(&map[string]BizSettings{})
	return t
}

// get is bizType's settings; the zero settings if it has none.
func (t *bizTable) get(bizType string) BizSettings {
	if t == nil {
		return BizSettings{BizType: bizType}
	}
	if s, ok := (*t.cur.Load())[bizType]; ok {
		return s
	}
	return BizSettings{BizType: bizType}
}

// all is every bizType with settings; the caller must not change it.
func (t *bizTable) all() map[string]BizSettings { return *t.cur.Load() }

// set applies one change of the bucket.
func (t *bizTable) set(s BizSettings, deleted bool) {
	m := maps.Clone(*t.cur.Load())
	if deleted {
		delete(m, s.BizType)
	} else {
		m[s.BizType] = s
	}
	t.cur.Store(&m)
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// decodeBiz is the settings an entry of the bucket holds: its key is the bizType.
func decodeBiz(e jetstream.KeyValueEntry) (BizSettings, error) {
	var v BizSettings
	err := json.Unmarshal(e.Value(), &v)
	v.BizType, v.Revision = e.Key(), e.Revision()
	return v, err
}

// bizService opens the settings bucket and keeps the table up to date until Stop. Start returns
// once the bucket's settings are loaded, so that the first fire already applies them.
type bizService struct {
	b    *Bridge
	kv   jetstream.KeyValue
	stop context.CancelFunc
	done sync.WaitGroup
	subs []*nats.Subscription // the alarm's (alarm.go)
}

func (s *bizService) Start(ctx context.Context) error {
	b := s.b
	bucket := b.sideBucket("_BIZ")
	octx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var kv jetstream.KeyValue
	err := openRetrying(octx, b, "the bizType settings bucket "+bucket, func(ctx context.Context) (err error) {
		kv, err = b.js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
				Description: "ax bridge per-bizType settings (ax.api.biz.set): key = bizType",
				Storage:     jetstream.FileStorage, Replicas: b.cfg.StreamReplicas})
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = b.js.KeyValue(ctx, bucket)
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bridge: open the bizType settings bucket %s: %w", bucket, err)
	}
	s.kv = kv
	wctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	w, err := kv.Watch(wctx, "*") // bizTypes: one token; bulk jobs (bulk.<job>) are not settings
	if err != nil {
		return fmt.Errorf("bridge: watch the bizType settings bucket %s: %w", bucket, err)
	}
	loaded := make(chan struct{})
	s.done.Add(1)
	go s.watch(w, loaded)
	if s.subs, err = b.subscribeAlarms(); err != nil {
		return fmt.Errorf("bridge: subscribe to the alarms: %w", err)
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		b.alarmLoop(wctx)
	}()
	select {
	case <-loaded:
		return nil
	case <-octx.Done():
		return fmt.Errorf("bridge: load the bizType settings bucket %s: %w", bucket, octx.Err())
	}
}

// watch applies the bucket's changes to the table until the watch stops.
func (s *bizService) watch(w jetstream.KeyWatcher, loaded chan struct{}) {
	defer s.done.Done()
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			close(loaded)
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			s.b.biz.set(BizSettings{BizType: e.Key()}, true)
			continue
		}
		v, err := decodeBiz(e)
		if err != nil {
			s.b.log.Warn("bizType settings that do not parse are ignored", "biz_type", e.Key(), "err", err)
			continue
		}
		s.b.biz.set(v, false)
	}
}

func (s *bizService) Stop(ctx context.Context) error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	if !waitCtx(ctx, &s.done) {
		return errors.New("bizType settings watch still running")
	}
	return nil
}

// sideBucket names a bucket kept beside the task bucket: the task bucket's name with suffix, or
// for a store without a name, the prefix in upper case, _TASKS and suffix (AX_TASKS_BIZ).
func (b *Bridge) sideBucket(suffix string) string {
	if named, ok := b.store.(interface{ Bucket() string }); ok {
		return named.Bucket() + suffix
	}
	return strings.ToUpper(b.cfg.Prefix) + "_TASKS" + suffix
}

// openRetrying runs open until it succeeds or ctx ends, at retry.Rewatch's pace: a fresh cluster
// may not place a replicated bucket at once ("no suitable peers for placement"). It returns the
// last error.
func openRetrying(ctx context.Context, b *Bridge, what string, open func(context.Context) error) error {
	bo := retry.Backoff{Policy: retry.Rewatch}
	for {
		err := open(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		b.log.Debug("open; trying again", "what", what, "err", err)
		if !bo.Next(ctx) {
			return err
		}
	}
}
