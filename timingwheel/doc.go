// Package timingwheel is a hybrid hashed timing wheel and 4-ary min-heap for
// scheduling many deadlines from a single owner goroutine.
//
// A Wheel is pure data: it starts no goroutines, takes no locks and never reads
// the clock. The owner passes the current time to Advance and arms one timer to
// the time reported by Next; see the Example. Entries due within the wheel's
// horizon (Options.Tick × Options.Slots, about 4s by default) live in
// per-tick slots; entries further out wait in a min-heap and move into the
// wheel as time reaches them.
//
// Guarantees, checked by a model-based fuzz test:
//   - an entry never fires before its due time, whatever the slot width;
//   - every pending entry fires exactly once (unless removed first);
//   - one Advance fires in deadline order, ties in insertion order
//     (an Add or Reschedule counts as an insertion);
//   - entries added or rescheduled from inside fire with a due time at or
//     before the time passed to that Advance are fired by the next Advance,
//     never by the same call, so a callback that re-arms itself cannot loop.
//
// Times are kept as int64 nanoseconds since the start time given to New,
// using the monotonic clock reading of time.Time when present. Due times
// before start, or before the latest Advance, fire on the next Advance.
//
// Memory: one node per pending entry in a chunked slab (48 bytes for a value of
// up to 8 bytes), an open-addressing id index of 8 to 16 bytes per entry, and a
// 4-byte heap slot for entries beyond the horizon. Removing an entry that waits
// in the heap leaves its node there as a zombie, as the Go runtime does with
// stopped timers; zombies are freed when they reach the top of the heap or
// when they pass a quarter of it. A Go map[string]int32 index alone
// costs about 56 bytes per entry at one million entries, which is why the index
// is a small purpose-built table.
package timingwheel
