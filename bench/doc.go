// Package bench is `axbridge bench`: the end-to-end yardstick that runs the bridge and NATS's own
// message schedules (Nats-Schedule) side by side on the same server settings, one after the
// other in one run, and prints one table with the ratio bridge/native per row.
//
// Every scenario side gets fresh nats-server subprocesses (a single node, or a 3-node loopback
// cluster with R3 streams), built from the module's nats-server dependency, with sync_interval
// set in a generated config file. The bridge runs in this process. See README.md.
package bench
