// Package kvstore keeps ax bridge's task records: one record per task in a JetStream KV bucket
// (JetStore), or in memory with the same semantics (MemStore), plus the record encoding and the
// task state machine as pure functions.
//
// # What is stored
//
// Each task is one key whose value is the Task encoded by EncodeTask (a line of JSON metadata,
// a newline, then the raw payload). The JetStore writes the metadata line once more as the
// message header HdrRecord, so that a watch of a bucket of large records loads its initial values
// from headers alone, without the payloads (Entry.Partial; headersOnlyMin). The key is Key(id, n) = "p<partition>.<task id>", where the
// partition is Partition(id, n), FNV-1a of the id modulo the bucket's partition count n. A watch
// can take only some partitions (Watch(ctx, p...) filters on PartitionFilter(p) = "p<p>.>" for
// each), so that a replica that owns them receives only their changes. The count is fixed when the
// bucket is created and recorded in its metadata under "ax.partitions"; OpenJetStore refuses
// another count (ErrPartitions), since every key would move.
//
// # Bucket settings
//
//   - File storage: records must survive a server restart.
//   - History 1: only the current record matters; CAS needs no older revisions, and a longer
//     history would multiply the stored payloads.
//   - No bucket TTL (MaxAge): an expiring WAITING task is a lost task.
//   - Per-message TTLs and delete markers that expire (LimitMarkerTTL = Config.MarkerTTL, which
//     sets the stream's AllowMsgTTL and SubjectDeleteMarkerTTL). Finished records retire by TTL:
//     every write of a record whose status is final (SUCCESS, DEAD, CANCELLED) carries
//     Nats-TTL = Config.Retention; WAITING and RUNNING writes carry none, and since the TTL
//     belongs to a message, the next write of the key (a requeue) drops it. No one walks the
//     bucket to clean it.
//   - Replicas from Config (1, or 3 on a cluster). An existing bucket is never recreated:
//     OpenJetStore creates it only if absent (never CreateOrUpdate, which could clobber the
//     metadata) and otherwise checks it. The one change it makes is to a bucket without
//     per-message TTLs (created before them): a stream update of AllowMsgTTL and
//     SubjectDeleteMarkerTTL alone. If the server refuses it, OpenJetStore fails.
//   - Atomic batch publish (AllowAtomicPublish, server 2.12+), for grouped writes (below): set
//     on a new bucket's stream right after it is created, and added to an existing one, by a
//     stream update of that field alone, unless Config.BatchMax is 1. If the server refuses it
//     (or ignores it), the store logs that once and sends every write on its own.
//
// # Revisions and CAS
//
// A record's revision is the stream sequence of its message, so revisions grow across all keys.
// Every write names the revision it expects as the key's last (Nats-Expected-Last-Subject-Sequence):
// Create expects none (or, if the key's last message is a delete marker, that marker), Update and
// Delete the revision the caller read. Reads (Get, and the re-read after a refused Create) are
// stream message gets answered by the stream leader, not nats.go's direct gets, which a lagging
// follower of a replicated bucket may answer with an older revision. A mismatch is ErrConflict, whatever the server reports: code 10071 on
// a single-replica stream, 10164 on a replicated one; nats.go surfaces these as ErrKeyExists,
// ErrKeyRevisionMismatch or a bare API error, and one function (mapError) translates them all.
// The Async variants pipeline the same writes (published at once, completed in order by a few
// goroutines) and report the same outcomes. They are grouped by group commit unless
// Config.BatchMax is 1: a write goes out at once on its own while the store has room in flight
// (commitInFlight unanswered sends), and the writes that queue behind the sends in flight go out
// together, up to BatchMax, as one atomic batch publish (one fsync under sync_interval: always,
// one raft proposal on a replicated bucket) as soon as an answer frees the room; each keeps its
// own expected revision and TTL, at most one write per key in a batch. Nothing is measured or
// timed: an idle store sends singles, a busy one batches. A batch the server
// refuses (one stale revision, a busy key, a create over a marker) stored nothing, and its writes
// go out again one by one, so each reports what it would have alone; a batch without an answer
// reports "outcome unknown" for each of its writes (jetstore_group.go). A write that no server takes (a replicated bucket
// electing its leader answers "no responders") is sent again every 50ms until the operation's
// deadline: nothing took it, so sending it again cannot write twice.
//
// # Deletes and tombstones
//
// A record leaves the bucket in one of two ways, and each leaves a delete marker, one small message
// that tells running watchers (EventDelete) and that Create expects as the key's last message
// when it writes the id again. Every marker expires after the marker TTL, so none lives for ever
// and a bucket that has seen millions of tasks does not keep one per task.
//
//   - Retirement: the TTL of a final record runs out. The server removes the record and writes a
//     marker (Nats-Marker-Reason: MaxAge, rolling the key up) whose own TTL is the bucket's
//     SubjectDeleteMarkerTTL. No client takes part, and the TTL belongs to the final message
//     alone: a later write of the key replaces that message and its TTL (but see the caveat).
//   - Delete (for the API): a purge marker (KV-Operation: PURGE with a subject rollup) on the
//     expected revision, carrying Nats-TTL = Config.MarkerTTL.
//
// After a marker expires the key has no message at all, and Create expects none. Either way an
// id used again after retirement is a new task with a new revision. A watcher that starts after a
// marker expired never learns of that delete, which is fine: it only wants current records.
// Caveat: the server writes its marker with a rollup and no expected sequence, so a CAS write of a
// final record (a requeue) that lands in the instant its TTL runs out can be rolled up with it;
// watchers then see the requeued record and its delete.
package kvstore
