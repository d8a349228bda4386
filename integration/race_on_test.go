//go:build race

package integration

// raceEnabled: this test binary runs with the race detector, and so do the bridge subprocesses it
// builds (buildBridge), so that a data race in a fault run fails the run.
const raceEnabled = true
