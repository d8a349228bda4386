// Package membership divides a task bucket's partitions among the live bridge replicas, through
// the membership KV bucket. A Member is one replica's side of it: its heartbeats, the member
// view, its share, its fence and the housekeeper election, all owned by one goroutine.
//
// # View and share
//
// Each replica heartbeats its key every Lease/4 and watches the others' keys. A replica counts as
// alive until Lease after its last heartbeat arrived, or until its key is deleted; one whose
// newest heartbeat says it is fenced is alive but owns nothing. Every replica computes the same
// assignment from the same live set (Assign: rendezvous hashing with bounded
// loads). All (member, partition) pairs are taken by score, highest first, and a pair assigns its
// partition unless the partition has an owner or the member its share, so each member gets
// ⌊n/k⌋ or ⌈n/k⌉ and a join or a death moves few partitions besides those that must move.
//
// A key in a watch's initial load counts from its arrival too, not from the server's time of its
// write: a local clock ahead of the server's would expire live replicas early. A replica that died
// a while ago goes when the server expires its key (a TTL of a lease), which the watch delivers.
//
// # Heartbeats
//
// A heartbeat's value is "<nonce> <seq>", or "<nonce> <seq> fenced" (beat.go): the nonce is random
// per process, seq counts its heartbeats (they may land out of order: the highest seq counts).
// A replica that sees its key written with another nonce shares its id with another process: a
// running one owns, writes and campaigns nothing from then on, and Err, Stop and the log say so;
// Start fails if another write of it comes within a lease after the initial load showed it (a
// key of a process that ended without a leave just expires, and Start goes on then).
//
// # Fencing
//
// A replica owns its partitions only until Lease − Lease/5 after it sent its last heartbeat that
// the server confirmed. The others count it alive until Lease after that heartbeat arrived, which
// is later, so a replica cut off or paused stops claiming and firing before anybody takes over.
// Heartbeats do not wait for one another, and each may take until the fence it would renew ends.
//
// A fence that runs out while a heartbeat is still unanswered means slow confirmations, not
// failures: the heartbeats likely land, and the others would count the replica alive while it
// owns nothing. So it tells them at once (a fenced heartbeat, which they take as owning nothing),
// and its heartbeats say fenced until one is confirmed within Lease/2 of its sending: then it
// claims its share back with a plain one, which renews the fence once confirmed. Only plain
// heartbeats sent after the last fenced one (or the last leave) renew the fence, so the others
// never hand its share back to a replica that owns it meanwhile.
//
// The fence machine (next in fence.go) says what a replica does at each heartbeat tick:
//
//	owning  --expired-->    fenced   heartbeats go on; a confirmed one ends the fence (above)
//	fenced  --fencedLong--> overdue  half a lease fenced: it leaves at the next tick
//	any     --down-->       leaving  its own connection down for a quarter of a lease
//	leaving --leaveDone-->  left     the others take its partitions at once
//	left    --tick-->       joining  after a pause that doubles with each failed join, up to two leases
//	joining --joinDone-->   fenced   not confirmed: it leaves again at the next tick
//	any     --renewed-->    owning   but leaving and left, whose old heartbeats renew nothing
//	any     --duplicate-->  ousted   another process writes its key: nothing more, for good
//
// The half lease damps a slow JetStream: a leave and the join after it move the replica's share
// away and back, and each move reloads those partitions. A fenced replica keeps its partitions'
// index and watch, so a heartbeat confirmed before anything moved lets it go on at once. A join's
// heartbeat says fenced, and is followed by a plain one once confirmed within Lease/2, so that
// the share is handed back only to a replica whose heartbeats are confirmed.
//
// # Joining and moves
//
// A replica loads the view and is given (Config.Acks) the partitions it will own before its first
// heartbeat, which is what makes the others hand them over. A lost partition's acks are still
// taken for a lease, so that an ack sent during a move is applied by someone.
//
// # Housekeeper
//
// Every Lease/3 a replica that is not the housekeeper tries to create HousekeeperKey (its TTL of a
// lease removes it once the holder stops), and the housekeeper renews it by CAS on its revision.
// Like ownership, the post holds only until Lease − Lease/5 after the last confirmed write.
package membership
