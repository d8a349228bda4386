package integration

import (
	"testing"
	"time"
)

// The fencing rule of the fault runs tells a fire that waited on its way from one a fenced replica
// decided too late: an older attempt arriving after a newer one was acked is explained by its
// replica's cut or a NATS node's loss, and by its replica's pause only if decided before it.
func TestExplainLate(t *testing.T) {
	t.Parallel()
	o := time.Now()
	at := func(s float64) time.Time { return o.Add(time.Duration(s * float64(time.Second))) }
	l := &faultLog{t: t, origin: o}
	l.faults = []fault{
		{kind: "stop", target: "b1", start: at(10), end: at(17), settled: at(19)},
		{kind: "kill9", target: "b2", start: at(30), end: at(31), settled: at(31)},
		{kind: "cut", target: "b3", start: at(40), end: at(50), settled: at(53)},
		{kind: "nats-kill9", target: "n0", start: at(60), end: at(65), settled: at(70)},
	}
	for _, c := range []struct {
		name, replica         string
		firedAt, first, again float64
		want                  bool
	}{
		{"decided before the pause, sent after it", "b1", 9.99, 16, 17.02, true},
		{"decided after the pause", "b1", 17.01, 16, 17.02, false},
		{"another replica's pause", "b2", 9.99, 16, 17.02, false},
		{"a kill", "b2", 31.5, 31, 32, false},
		{"its own cut", "b3", 45, 46, 50.1, true},
		{"a NATS node's loss", "b1", 62, 63, 66, true},
		{"no fault at all", "b1", 80, 81, 82, false},
	} {
		if _, got := l.explainLate(c.replica, at(c.firedAt), at(c.first), at(c.again)); got != c.want {
			t.Errorf("%s: explained %v, want %v", c.name, got, c.want)
		}
	}
}
