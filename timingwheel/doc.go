// Package timingwheel is a two-level hashed timing wheel, with a 4-ary
// min-heap for far deadlines, for scheduling many deadlines from a single
// owner goroutine.
//
// A Wheel is pure data: it starts no goroutines, takes no locks and never reads
// the clock. The owner passes the current time to Advance and arms one timer to
// the time reported by Next; see the Example. Entries due within
// 2 × Options.Tick × Options.Slots (about 8s by default) live in per-tick
// level-0 slots; entries due within Slots × Slots ticks (about 4.6h) live in
// level-1 slots of Slots ticks each; entries further out wait in a min-heap
// and move into the wheel as time reaches them. Level 0 spans two level-1
// slots, so each Advance moves a bounded number (256) of the next level-1
// slot's entries into level 0 ahead of time, and no single Advance pays for
// a whole slot's cascade. Add, Remove and Reschedule are O(1) list operations
// below the heap's horizon.
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
// Ids. The wheel keeps its own copy of each id: up to 39 bytes (a UUID's 36
// fit) inside the entry's node, longer ones in a side map. Comparing an id
// then reads nothing beyond the node, so Remove, Get and Reschedule cost one
// read of the index (its tag and node index lines, prefetched together so
// that their cache misses overlap) and one of the node. Advance hands fire a
// string copied out of the node into a shared 2 KB block.
//
// An owner that holds the current time and a delay calls AddAfter(id, now,
// d, v), which is Add(id, now.Add(d), v) without the time.Time arithmetic of
// now.Add; Add takes an absolute due time.
//
// Add is O(1) and defers indexing: it links the entry where it fires and
// queues it, and the queue (up to 32 entries) is indexed in one pass before
// anything reads the index. Add prefetches the index position of its entry
// (on amd64 and arm64), so the cache misses of many Adds overlap. An Add of
// an id that is already pending replaces that entry (its handles go stale).
//
// Remove and RemoveHandle are O(1) and write only the removed node and its
// index position: the node stays in its list as a zombie, like a stopped
// runtime timer, and is freed when Advance, Next or a cascade reaches it, or
// by a sweep that starts when zombies outnumber the pending entries and
// visits 1024 nodes of the slab per Remove or Advance. Zombies in the heap
// are freed when they reach its top, or all at once when they pass a quarter
// of it.
//
// Memory: one node per pending entry in a chunked slab (72 bytes for a value
// of up to 4 bytes, 80 for 8, the id included) and an id index of 5 bytes per
// position, 10 to 20 bytes per entry: a one-byte tag array, which lookups
// probe one tag at a time and the indexing of queued entries eight at a time,
// and the node index of each position. A node remembers its index position,
// so RemoveHandle and firing never hash or look up the id. A Go
// map[string]int32 index alone costs about 56 bytes per entry at one million
// entries, which is why the index is a small purpose-built table. With a value
// without pointers the slab holds no pointers, so the garbage collector never
// scans it.
//
// No call stalls on re-indexing. When the index table's used positions (live
// entries and the tombstones removals leave) pass three quarters, a new
// table, sized for twice the live entries, takes the inserts, and each insert
// moves the entries of a few slab nodes out of the old table, so the old one
// is empty long before the new one fills. Until then a lookup that misses in
// the new table also probes the old one, and both tables are held (at most
// twice the index's memory). Re-inserting every entry at once had stalled one
// call for 50–90 ms at 1.5M entries; growing past that point now costs the
// slowest Add 1–5 ms, mostly allocating the new table. The move finds entries
// by scanning the slab, whose size is the most entries the wheel has held at
// once: a wheel that once held millions and now holds a few hundred scans all
// of it within a few inserts, as the old rebuild did (its table, sized for the
// old peak, rarely fills with so few entries).
package timingwheel
