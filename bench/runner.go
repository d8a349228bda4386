package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"
)

// runner runs scenario sides; each side gets fresh servers.
type runner struct {
	o     options
	p     *progress
	bin   string
	tmp   string
	nodes int
	log   *slog.Logger // the bridge's logger
	// payload is every task's body (--payload-bytes), on both sides.
	payload []byte
	// intakeRate is each side's measured intake rate until stored (tasks/s), for the burst lead.
	intakeRate map[string]float64
}

func (r *runner) scenario(ctx context.Context, sc, side string) *result {
	x := &result{vals: map[string]float64{}}
	srv, err := startServers(ctx, r.bin, r.tmp, r.o.sync, r.nodes, r.o.burstProf != "")
	if err != nil {
		x.err = err
		return x
	}
	defer srv.close()
	r.p.say("%d nats-server process(es) up, sync %s", r.nodes, r.o.sync)
	switch side + "/" + sc {
	case "native/intake":
		x.err = r.nativeIntake(ctx, srv, x)
	case "bridge/intake":
		x.err = r.bridgeIntake(ctx, srv, x)
	case "native/spread":
		x.err = r.nativeSpread(ctx, srv, x)
	case "bridge/spread":
		x.err = r.bridgeSpread(ctx, srv, x)
	case "native/burst":
		x.err = r.nativeBurst(ctx, srv, x)
	case "bridge/burst":
		x.err = r.bridgeBurst(ctx, srv, x)
	case "native/isolation":
		x.err = r.nativeIsolation(ctx, srv, x)
	case "bridge/isolation":
		x.err = r.bridgeIsolation(ctx, srv, x)
	case "native/series":
		x.err = r.nativeSeries(ctx, srv, x)
	case "bridge/series":
		x.err = r.bridgeSeries(ctx, srv, x)
	case "native/limits": // native schedules have no such bound: no figure
	case "bridge/limits":
		x.err = r.bridgeLimits(ctx, srv, x)
	case "native/bulk": // native schedules have no DEAD state and no bulk operations: no figure
	case "bridge/bulk":
		x.err = r.bridgeBulk(ctx, srv, x)
	case "native/pending":
		x.err = r.nativePending(ctx, srv, x)
	case "bridge/pending":
		x.err = r.bridgePending(ctx, srv, x)
	case "native/binary": // native schedules have no process of their own: no figure
	case "bridge/binary":
		x.err = r.bridgeBinary(ctx, srv, x)
	default:
		x.err = fmt.Errorf("unknown scenario %s", sc)
	}
	if sc == "intake" && x.err == nil {
		if r.intakeRate == nil {
			r.intakeRate = map[string]float64{}
		}
		r.intakeRate[side] = x.vals["intake_stored"]
	}
	return x
}

// burstLead is how far ahead of the start of publishing the burst's due instant lies: 1.5 times
// the time the side's intake row needed for that many tasks, plus 5 s; --lead overrides it.
func (r *runner) burstLead(side string) time.Duration { return r.leadFor(side, r.o.burst) }

// leadFor is burstLead for n tasks.
func (r *runner) leadFor(side string, n int) time.Duration {
	if r.o.lead > 0 {
		return r.o.lead
	}
	rate := r.intakeRate[side]
	if rate <= 0 {
		rate = 1000 // a cautious guess for fsync on every write
	}
	return time.Duration(1.5*float64(n)/rate*float64(time.Second)) + 5*time.Second
}

// waitFor polls cond every 10 ms until it holds, reporting status every 2 s; it fails once
// within has passed or ctx ended. (Conditions that ask the server cost it a JetStream API call
// each: polling faster would load the server being measured.)
func (r *runner) waitFor(ctx context.Context, what string, within time.Duration, cond func() bool, status func() string) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	stop := r.p.every(what, status)
	defer stop()
	if !poll(ctx, 10*time.Millisecond, cond) {
		return fmt.Errorf("%s: not done within %v (%s)", what, within, status())
	}
	return nil
}

// serverVersion is what the nats-server binary says its version is.
func serverVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(out))
	if _, v, ok := strings.Cut(s, ": "); ok {
		return v
	}
	return s
}
