package sched

import "time"

// Time is one look at both clocks, taken by the caller: the core reads no clock itself.
type Time struct {
	Mono time.Time // runtime clock: monotonic
	Wall int64     // the wall clock, UTC Unix ns
	Ms   int64     // Wall in ms
}

// Until is how long from t until the wall clock reaches the UTC Unix ms instant ms: at most
// limit, never negative. A due time in year 2262 or at math.MaxInt64 ms is simply far away.
func (t Time) Until(ms int64, limit time.Duration) time.Duration {
	if ms <= t.Ms {
		return 0
	}
	diff := ms - t.Ms // > 0 unless it overflowed
	if diff < 0 || diff > int64(limit/time.Millisecond)+1 {
		return limit
	}
	d := time.Duration(diff)*time.Millisecond - time.Duration(t.Wall-t.Ms*int64(time.Millisecond))
	return min(max(d, 0), limit)
}
