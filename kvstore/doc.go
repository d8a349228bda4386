// Package kvstore keeps ax bridge's task records: one record per task in a JetStream KV bucket
// (JetStore), or in memory with the same semantics (MemStore), plus the record encoding and the
// task state machine as pure functions.
//
// # What is stored
//
// Each task is one key whose value is the Task encoded by EncodeTask (a line of JSON metadata,
// a newline, then the raw payload). The key is Key(id, n) = "p<partition>.<task id>", where the
// partition is Partition(id, n), FNV-1a of the id modulo the bucket's partition count n. A replica
// indexes only its partitions by watching PartitionFilter(p) = "p<p>.>" for each of them, so it
// receives only their changes. The count is fixed when the bucket is created and recorded in its
// metadata under "ax.partitions"; OpenJetStore refuses another count (ErrPartitions), since every
// key would move.
//
// # Bucket settings
//
//   - File storage: records must survive a server restart.
//   - History 1: only the current record matters; CAS needs no older revisions, and a longer
//     history would multiply the stored payloads.
//   - No bucket TTL and no per-key TTL: an expiring WAITING task is a lost task, and an update
//     erases a per-key TTL anyway. Retention of finished records is the bridge's job.
//   - Replicas from Config (1, or 3 on a cluster). An existing bucket is never reconfigured:
//     OpenJetStore creates it only if absent (never CreateOrUpdate, which could clobber the
//     metadata) and otherwise checks it.
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
// goroutines) and report the same outcomes. A write that no server takes (a replicated bucket
// electing its leader answers "no responders") is sent again every 50ms until the operation's
// deadline: nothing took it, so sending it again cannot write twice.
//
// # Deletes and tombstones
//
// Delete writes a purge marker (KV-Operation: PURGE with a subject rollup) on the expected
// revision. With history 1 a delete marker and a purge marker cost the same: one small message
// per deleted key that stays until it is removed. The purge is chosen because it also drops every
// older revision if the history is ever raised. The marker is what tells running watchers about
// the delete and lets a later Create on the same id succeed on its revision. The trade-off: markers
// accumulate, one per deleted task (tens of bytes each, plus index memory on the server), until
// JetStore.PurgeDeletes removes the old ones; a watcher that starts after that never learns of
// those deletes, which is fine because it only wants current records. The alternative, removing
// messages without a marker (stream message delete), would leave running watchers holding
// deleted tasks, so it is not used.
package kvstore
