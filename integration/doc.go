// Package integration holds the end-to-end tests of the ax bridge: real nats-server processes
// (in-process, or a subprocess where a crash must be a crash), real nats.go clients, the bridge as
// users run it. It has no non-test code; see README.md for the benchmark.
package integration
