// Package sched is the bridge's scheduling core: a deterministic state machine, in the style of
// etcd raft's RawNode, that decides what happens to each task this replica owns. It imports no
// NATS package, starts no goroutine and reads no clock: the caller's loop feeds it inputs and
// carries out its outputs.
//
// Inputs: a watch event of the task bucket (Apply), a worker's result (Result), the partitions
// owned (Own), the time (Now), and the reconciler's questions (Suspect, Repair). Outputs: jobs for
// the workers (Next, then Sent once a worker took one), and after each turn (Take) what Ready
// returns: claims held for their due time that are due now (publish them), and the revisions
// after which the fired cache drops a task.
//
// Every live task of an owned partition has one entry in the index, at the time its next step
// is due: its fire (a WAITING record) or its lease end (RUNNING). A finished record has none. The
// index is the hybrid timing wheel and heap of package timingwheel: a wheel of 1 ms slots spans
// the pre-read window (Config.PreRead, at most a minute) in front of the heap of the far future,
// and a fire that enters the wheel's span (Now) is the moment its payload is read, in batches
// (PreRead jobs), so that its claim at the due time is one write. The state of a task
// between the index and its next record (a step queued or in a worker's hands, a fire put back
// after a failed store call, a claim whose outcome is unknown, a claim held for its due time, the
// record read ahead) is one struct in one map, bounded by the work queued and in flight: the
// far-future million are entries of the index alone.
//
// Fires are indexed in lanes, one queue of the index per bizType (up to 64; past that bizTypes
// share them), and due fires are taken from the lanes in turn: one bizType's burst of overdue
// fires does not hold back another's fires due after it (a lane's wheel costs 24 bytes per ms of
// the pre-read window: 48 KB at the default 2 s).
//
// Due work waits in two bounded queues, fires first and housekeeping (lease ends, pre-reads) after
// every houseEvery fires; the core takes due steps from the index only while its queue has room,
// and fires only while the claim budget has room (budget.go), so a backlog stays in the index, in
// deadline order, where no lease runs.
package sched
