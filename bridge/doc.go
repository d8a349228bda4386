// Package bridge is the ax bridge service: it takes schedule messages from the intake stream
// (ax.schedule.<bizType>), keeps each task as a record in the task store, fires it to
// ax.fire.<bizType> at its due time and applies the consumer's ack (subjects.md is the protocol).
//
// # Shape
//
//   - Intake: a JetStream consumer shared by all replicas. Each message is validated
//     (parseSchedule, a pure function); a bad one is reported on ax.rejected.<bizType> and
//     dropped; a good one is created in the store with a pipelined write, and the message is acked
//     only once the record is durable. The stream has limits retention (an ack is not a write):
//     the housekeeper purges it below the consumer's ack floor (intake_purge.go), only while that
//     consumer is the stream's only one, reads all of it and has no max deliver. The consumer the
//     bridge creates has none: the bridge bounds deliveries itself (Config.IntakeMaxDeliver).
//   - The scheduling loop (loop.go) is the only owner of the index of live tasks (slots.go: one
//     entry per WAITING or RUNNING task, for its next step: fire, pre-read or lease end, keyed by
//     UTC Unix ms and compared with a fresh reading of the clock, so a clock step neither delays
//     nor spins) and of one timer armed to the next due step, at most a second away. It watches
//     the store (initial load, then live changes; a watch that ends is started again off the
//     loop), takes due steps into two bounded job queues, fires before lease ends, and holds
//     payloads only for tasks due within Config.PreRead, within a count and a byte bound. Finished
//     records leave the index; the server retires them. A paced reconciler (reconcile.go) reads
//     the bucket now and then and repairs any overdue task the index missed.
//   - Workers run the due steps: claim by CAS (WAITING → RUNNING) and publish the fire message from
//     the write's completion; count an expired lease as a failed attempt. Fires are claimed a
//     little ahead of their due time (ahead.go; Config.ClaimAhead): a claim that lands before the
//     task is due goes back to the loop, which publishes it at the due time, so the claim's write
//     is not part of the fire's lateness.
//   - Acks arrive on one subscription per owned partition (ax.ack.*.<partition>.>), which also
//     receives NATS's no-responders status when nobody was subscribed to the fire subject.
//   - Replicas (package membership; members.go runs it): each heartbeats in the members bucket,
//     computes from the live set which partitions it owns, and watches, claims, fires and takes
//     acks only in those; one that stops heartbeating loses them within a lease and stops claiming
//     itself before that. One replica is elected housekeeper: it reports the member count and
//     purges the intake stream.
//
// Every state change is a compare-and-swap on the record's revision, so several bridges on one
// bucket never fire an attempt twice; a task fires again only after its attempt failed.
//
// # The write path
//
// What one task costs the servers, message by message (issue 27 item 1). "Stored" is a message
// appended to a stream; "removal" is a message appended earlier and dropped: a KV revision that a
// newer one of its key replaces (history 1, dropped by the stream's per-subject limit, no
// tombstone) or intake messages purged below the ack floor. axbridge bench counts both over all
// streams ("writes per successful task", "removals per successful task").
//
// A one-shot task that succeeds at its first attempt:
//
//	step                                  stream         stored  removed
//	1 schedule published (producer)       intake         +1
//	2 record created, WAITING             task bucket    +1
//	  schedule acked once 2 is durable    (consumer state, not a message)
//	3 claim: WAITING -> RUNNING (CAS)     task bucket    +1      the WAITING revision
//	  fire: core publish ax.fire.<biz>    (not stored by the bridge)
//	4 ack applied: RUNNING -> SUCCESS     task bucket    +1      the RUNNING revision
//	  purge below the ack floor           intake                 the schedule (one purge per 2 s)
//	                                                     4       3
//
// and later, outside a burst's count: the SUCCESS record's Nats-TTL (Config.Retention) runs out,
// the server removes it and writes a MaxAge delete marker that itself expires (MarkerTTL); no
// client takes part. Each retry adds two stored messages and two removals (the nak or lease end
// writes WAITING at the backoff, the next claim writes RUNNING); a cancel, reschedule or requeue
// is one each. A series costs steps 1 and 2 once, then per occurrence a claim and a settle (the
// settle writes WAITING at the next tick, Run+1): two stored, two removed. With the ack log on
// (Config.NoAckLog false) every consumer reply is also stored once in a memory stream that drops
// it after AckLogMaxAge. Native Nats-Schedule costs 2 stored (the schedule, the fired message in
// its target stream) and 1 removed (the schedule).
//
// What each costs, by server setting:
//
//   - Default sync (one node, file storage, sync_interval 2m): a stored message is a write into
//     the stream's block in the page cache; the cost is server CPU, some tens of microseconds per
//     message, and the round trip, which the bridge hides by pipelining (the Async writes: up to
//     thousands unanswered). Single pipelined writes are the fastest way here: an atomic batch
//     on one node is staged in a file store of its own that is synced at its commit (nats-server
//     jetstream_batching.go, newBatchStore), so batches halve the rate (bench/README.md, "After
//     grouped writes").
//   - sync_interval: always (one node): every stored message is an fsync before its ack, and
//     single writes go one disk sync at a time (about 460 a second on this machine's disk). An
//     atomic batch of up to 1000 writes costs two syncs (its staging store and the stream), so
//     batches of 64 to 1000 were 6 to 24 times faster (JetStoreGroupedUpdate). The store's group
//     commit (kvstore/doc.go) sends a write alone while none is unanswered and the writes queued
//     behind it as one batch, so a burst goes out in batches on every setting.
//   - Three nodes, R3: every stored message is a raft proposal: the leader appends it, followers
//     append it, it commits on a quorum of two and is applied on each. Proposals queued together
//     travel in one append entry, so pipelined writes already share round trips; an atomic batch
//     is one multi-entry proposal staged in memory. The intake consumer's acks are proposals of the
//     consumer's own raft group. A removal costs no proposal of its own: each node applies it with
//     the write that replaced it (or with the purge).
//
// The guarantees each write is there for:
//
//   - Create before the intake ack: a schedule is acked only once its record is durable, so a
//     bridge that dies in between leaves the message to be delivered again (never lost); the
//     create expects no key, so a redelivery stores nothing twice.
//   - The claim (3) is the fence: it names the WAITING revision, so of several replicas (or a
//     replica and an operator's cancel) exactly one wins, and the RUNNING record tells a restart
//     that an attempt may be out there: the next attempt fires only after its lease, with a higher
//     Ax-Attempt (never a silent repeat), and an ack names the claim it answers (fenced acks).
//   - The settle (4) makes the outcome durable: without it a restart would fire the task again.
//
// Options weighed to take a write out (none is built yet; issue 27 item 2):
//
//   - Fire without the claim write, recording the attempt with its outcome. The partition lease
//     already fences other replicas, so the CAS race is not what the claim buys; what it buys is
//     the restart's knowledge that an attempt is out. Without it, a replica that takes over a
//     partition must assume that every WAITING task due before the previous owner's fence (its
//     lease end plus the claim-ahead) may have fired: it fires them with Attempt+2, so a repeat
//     still carries a higher Ax-Attempt, and counts the unseen attempt against MaxRetry. Saves
//     one stored message and one removal (3 and 2); costs an attempt number on every handover
//     and makes RUNNING a state only the owner's memory holds (get and list read the owner).
//   - The intake message as the record until the first state change: no create (2); the claim
//     becomes the key's first write (a create, which still fences). Saves one stored and one
//     removed, but the intake stream can then be purged only below the oldest unclaimed task, a
//     restart must index the intake stream as well as the bucket, and get, cancel and
//     reschedule must find a task in either.
//   - A claim and the previous task's ack in one batch: fewer round trips, not fewer messages.
package bridge
