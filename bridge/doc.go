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
package bridge
