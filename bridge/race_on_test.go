//go:build race

package bridge

// raceEnabled: the race detector slows the bridge's goroutine hand-offs many times over, so the
// heaviest tests scale down under it.
const raceEnabled = true
