package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/synadia-io/orbit.go/jetstreamext"
)

// maxGetMany bounds one batched read; GetMany splits larger requests.
const maxGetMany = 256

// GetMany reads the current records of many tasks with batched direct gets (one request per up to
// 256 keys), for reading ahead of need. Missing and deleted tasks are left out; records that do not
// decode are left out too (the watch reports them). On a replicated bucket any replica may answer,
// so a record can be slightly behind the leader's: callers must only use it for a CAS write,
// which then fails harmlessly, never to decide anything on its own.
func (s *JetStore) GetMany(ctx context.Context, ids []string) ([]Entry, error) {
	ctx, cancel := withTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	out := make([]Entry, 0, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxGetMany)]
		ids = ids[len(chunk):]
		subjects := make([]string, 0, len(chunk))
		for _, id := range chunk {
			if ValidateID(id) == nil {
				subjects = append(subjects, s.prefix+Key(id, s.cfg.Partitions))
			}
		}
		if len(subjects) == 0 {
			continue
		}
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, s.js, "KV_"+s.cfg.Bucket, subjects)
		if err != nil {
			return out, fmt.Errorf("get %d tasks: %w", len(subjects), err)
		}
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return out, fmt.Errorf("get %d tasks: %w", len(subjects), err)
			}
			if isMarker(m.Header) {
				continue
			}
			id, ok := IDFromKey(strings.TrimPrefix(m.Subject, s.prefix))
			if !ok {
				continue
			}
			if e, err := decodeEntry(id, m.Sequence, m.Data); err == nil {
				out = append(out, e)
			}
		}
	}
	return out, nil
}
