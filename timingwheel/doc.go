// Package timingwheel is the scheduling index of ax bridge: the pure data structure that holds
// every pending step the bridge's loop is waiting for and hands them out in deadline order.
//
// An Index holds at most one Entry per id. Each entry is due at an int64 time in the caller's unit
// (the bridge uses UTC Unix milliseconds, compared with a fresh clock reading every time, so no
// origin is held that a clock step could invalidate) and lives in one of a fixed number of queues,
// each a 4-ary min-heap ordered by due time, ties in insertion order (a Put that replaces an entry
// counts as an insertion). The bridge keeps fires and housekeeping (lease ends) in two queues, so
// that it can take due fires first and stop taking from either as soon as its workers' queue is
// full: an overdue backlog waits here, a few dozen bytes per entry, not in a queue of jobs.
//
// It is pure data: no goroutines, no locks, no clock. The owner passes the time in (Peek, then Pop
// while the earliest entry is due; CountDue) and arms one timer to the earliest due time; see the
// Example. Put, Remove and Pop are O(log n), Get and Peek O(1).
//
// Memory: the ids back to back in one byte arena (compacted once removed ids are over half of
// it), a map from each id's 64-bit hash to its 24-byte node (ids that share a hash chain their
// nodes), and a 24-byte heap element per entry that holds the ordering key inline, so that
// sifting reads only the heap. None of it holds a pointer per entry, so the garbage collector has
// nothing to mark in an index of millions (BenchmarkIndex: one collection with 1M entries takes
// 14 ms of CPU, against 62-70 ms when the map was keyed by id strings), and a growing map moves
// 64-bit keys, not strings. At one million entries with UUID-sized ids that is about 128 bytes
// per entry (161 with string keys).
//
// The package name stays from the hybrid timing wheel it held until issue 15. The bridge's call
// pattern (millions of far-future entries, each touched a few times, draining bounded by the
// caller) never used what the wheel added over a heap; the wheel, its slab allocator and its
// benchmarks against other wheels were removed, and this index moved here from the bridge.
package timingwheel
