package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/procs"
)

// startCPUProfile starts a CPU profile into file (none if file is empty); the returned func ends it.
func startCPUProfile(file string) (func(), error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// profileFrom waits until at, then starts a CPU profile into file (none if file is empty); the
// returned func ends it and says the CPU time of this process and of the servers while it ran.
func (r *runner) profileFrom(ctx context.Context, srv *serverSet, at time.Time, file string) (func(), error) {
	if file == "" {
		return func() {}, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(at)):
	}
	stop, err := startCPUProfile(file)
	if err != nil {
		return nil, err
	}
	r.profileServers(ctx, srv, file)
	cpu0, _ := procs.CPU(os.Getpid())
	wall0 := time.Now()
	srv0, _ := srv.CPU()
	return func() {
		stop()
		srv1, _ := srv.CPU()
		cpu1, _ := procs.CPU(os.Getpid())
		r.p.say("profile %s: %v of CPU in %v; the nats-servers took %v", file, cpu1-cpu0,
			time.Since(wall0).Truncate(time.Millisecond), srv1-srv0)
	}, nil
}

// serverProfileSpan is how long each nats-server is profiled from the burst's due instant: a
// server's profile runs for whole seconds given when it starts, and this covers the bridge's
// 50k burst on this machine (1.5–5 s) with room.
const serverProfileSpan = 8 * time.Second

// profileServers starts a CPU profile of every node of srv for serverProfileSpan, each into
// file.<node> (file.n0, …), and says where each went or why it failed.
func (r *runner) profileServers(ctx context.Context, srv *serverSet, file string) {
	for _, nd := range srv.Nodes() {
		go func() {
			out := file + "." + nd.Name
			if err := nd.CPUProfile(ctx, serverProfileSpan, out); err != nil {
				r.p.say("profile of nats-server %s: %v", nd.Name, err)
				return
			}
			r.p.say("profile %s: nats-server %s, %v from the due instant", out, nd.Name, serverProfileSpan)
		}()
	}
}

// heapAlloc is the heap in use after two collections.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func (r *runner) bridgePending(ctx context.Context, srv *serverSet, x *result) error {
	h0 := heapAlloc()
	s, err := r.openBridge(ctx, srv)
	if err != nil {
		return err
	}
	defer s.close()
	total := r.o.pending
	farFires := newFires()
	if err := s.consume("far", farFires, nil, nil, nil); err != nil {
		return err
	}
	rss0, rssErr := srv.rss()
	start := time.Now()
	if err := publishAll(ctx, r.p, "publish", s.nc, total, func(i int) *nats.Msg {
		return bridgeSchedule(r.payload, "far", i, func(h nats.Header) { h.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i)) })
	}); err != nil {
		return err
	}
	if err := r.waitStored(ctx, s, 30*time.Minute); err != nil {
		return err
	}
	x.vals["pending_intake"] = float64(total) / time.Since(start).Seconds()
	if rss1, err := srv.rss(); err == nil && rssErr == nil {
		x.vals["server_rss"] = float64(rss1-rss0) / float64(total)
	}
	if _, ok := gaugeValue(s.reg, "ax_tasks_indexed"); ok {
		regs := s.registries() // each replica indexes its own partitions
		var idx atomic.Int64
		if err := r.waitFor(ctx, "indexed", 10*time.Minute, func() bool {
			v := 0.0
			for _, reg := range regs {
				n, _ := gaugeValue(reg, "ax_tasks_indexed")
				v += n
			}
			idx.Store(int64(v))
			return v >= float64(total)
		}, func() string { return fmt.Sprintf("%d/%d indexed", idx.Load(), total) }); err != nil {
			return err
		}
		x.vals["heap_steady"] = float64(heapAlloc()-h0) / float64(total)
		if err := r.measureCensus(ctx, s.nc, total, x); err != nil {
			return err
		}
	} else {
		x.notes = append(x.notes, "no ax_tasks_indexed gauge: steady heap not measured")
	}

	r.p.say("restart the bridge with %d tasks pending", total)
	s.stopBridge()
	newFire := newFires()
	if err := s.consume("new", newFire, nil, nil, nil); err != nil {
		return err
	}
	if _, err := s.js.PublishMsg(ctx, bridgeSchedule(r.payload, "new", 0, func(h nats.Header) { h.Set(bridge.HeaderDelay, "0") })); err != nil {
		return fmt.Errorf("schedule before restart: %w", err)
	}
	stopProfile, err := startCPUProfile(r.o.cpuProfile)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.startBridge(ctx, s); err != nil {
		stopProfile()
		return err
	}
	err = r.ready(ctx, s, 10*time.Minute)
	stopProfile()
	if err != nil {
		return err
	}
	x.vals["restart_ready"] = time.Since(t0).Seconds()
	err = r.waitFor(ctx, "first fire", time.Minute, func() bool { return newFire.distinct() >= 1 }, func() string { return "waiting" })
	x.lost, x.early = newFire.check(1)
	s.account(x)
	x.early += farFires.distinct()
	if err != nil {
		return err
	}
	x.vals["restart_fire"] = newFire.lastAt().Sub(t0).Seconds()
	x.vals["heap_restart"] = float64(heapAlloc()-h0) / float64(total)
	return nil
}
