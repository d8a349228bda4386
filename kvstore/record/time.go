package record

import (
	"math"
	"time"
)

// AddMs returns ms + d in whole milliseconds, rounding d up and saturating.
func AddMs(ms int64, d time.Duration) int64 {
	n := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		n++
	}
	switch {
	case n > 0 && ms > math.MaxInt64-n:
		return math.MaxInt64
	case n < 0 && ms < math.MinInt64-n:
		return math.MinInt64
	}
	return ms + n
}

// SubMs returns ms - d in whole milliseconds, saturating.
func SubMs(ms int64, d time.Duration) int64 {
	n := int64(d / time.Millisecond)
	switch {
	case n > 0 && ms < math.MinInt64+n:
		return math.MinInt64
	case n < 0 && ms > math.MaxInt64+n:
		return math.MaxInt64
	}
	return ms - n
}
