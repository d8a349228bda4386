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
// NewWheel puts a timing wheel in front of each queue's heap, for a caller that wants to know
// ahead which entries come due (the bridge's core uses one whose span is its pre-read window:
// a fire entering the span is when its payload is read): a ring of span one-unit slots
// covering [cur, cur+span), a late heap for entries due before cur, and the far heap for the rest.
// Advance(now) moves cur forward, moves the slots passed into late, and takes from the far heap
// every entry due before now+span, reporting each; a Put due within the window goes straight to
// its slot and is not reported. Peek, Pop and CountDue see late, the slots and far in the same
// (due, seq) order as the heap alone. The wheel is for that report, not for speed: every entry
// still leaves a heap once, and then its slot. In BenchmarkFireLoop (1M pending, 10,000 fires a
// second) the loop took a median of 12.8 ms of CPU per simulated second with the heap alone, 16.6
// with a wheel of 2 s and 19.1 with one of 10 s; memory per entry is the same.
//
// It is pure data: no goroutines, no locks, no clock. The owner passes the time in (Peek, then Pop
// while the earliest entry is due; CountDue; Advance) and arms one timer to the earliest due time;
// see the Example. Put, Remove and Pop are O(log n), Get and Peek O(1) (with a wheel, Peek may scan
// the bitmap of its slots, 64 at a time).
//
// Memory: the ids back to back in one byte arena (compacted once removed ids are over half of
// it), a map from each id's 64-bit hash to its 32-byte node (ids that share a hash chain their
// nodes; nodes live in pages of 1,024, so a growing index never copies them), and a 16-byte heap
// element per entry that holds the ordering key inline, so that sifting reads only the heap (its
// 32-bit seq orders ties by signed distance: only ties put 2^31 puts apart can come out
// reversed). None of it holds a pointer per entry, so the garbage collector has nothing to mark in
// an index of millions (BenchmarkIndex: one collection with 1M entries takes about 20 ms of CPU,
// against 62-70 ms when the map was keyed by id strings), and a growing map moves 64-bit keys, not
// strings. At one million entries with UUID-sized ids that is about 124 bytes per entry (161 with
// string keys); a wheel adds 24 bytes a slot per queue.
//
// Entering says when Advance next reports an entry, for the owner's timer. New keeps the heaps
// alone, without a wheel.
package timingwheel
