package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/internal/procs"
	"github.com/axbridge/axbridge/internal/scrape"
)

// Memory per replica (issue 16's bar: with 3 replicas each holds about a third of one replica's
// index). A nats-server subprocess (default sync) holds AX_MEMORY_PENDING (default 300,000)
// far-future tasks, stored by a first bridge that is then stopped. One bridge subprocess alone
// loads them; its RSS (VmRSS) and ax_tasks_indexed are read once the index is steady. It stops,
// and three fresh bridges load the same bucket: the RSS and ax_tasks_indexed of each. Too big for
// go test ./..., so a benchmark:
//
//	go test -run '^$' -bench ReplicaMemory -benchtime 1x -timeout 30m ./integration
func BenchmarkReplicaMemory(b *testing.B) {
	n := envInt("AX_MEMORY_PENDING", 300_000)
	bin := buildBridge(b)
	c := startProcCluster(b, 1, false)
	nc := natstest.Connect(b, c.URL())

	loader := newMetricsBridge(b, bin, "loader", c.URL())
	if err := loader.start(3 * time.Minute); err != nil {
		b.Fatal(err)
	}
	publishMsgs(b, nc, n, func(i int) *nats.Msg {
		m := nats.NewMsg(bridge.SchedulePrefix + "mem")
		m.Data = benchPayload
		m.Header.Set(bridge.HeaderTaskID, "mem-"+strconv.Itoa(i))
		m.Header.Set(bridge.HeaderDelay, strconv.Itoa(3600_000+i))
		return m
	})
	if !checkFor(20*time.Minute, func() bool { v, _ := loader.indexed(); return v >= float64(n) }) {
		b.Fatalf("the loader did not index %d tasks", n)
	}
	loader.shutdown(b)

	for b.Loop() {
		solo := newMetricsBridge(b, bin, "solo", c.URL())
		if err := solo.start(3 * time.Minute); err != nil {
			b.Fatal(err)
		}
		soloIdx, soloRSS := steady(b, []*metricsBridge{solo}, n)
		solo.shutdown(b)

		var three []*metricsBridge
		for i := range 3 {
			p := newMetricsBridge(b, bin, "r"+strconv.Itoa(i), c.URL())
			if err := p.start(3 * time.Minute); err != nil {
				b.Fatal(err)
			}
			three = append(three, p)
		}
		idx, rss := steady(b, three, n)
		var sumRSS int64
		for i, p := range three {
			sumRSS += rss[i]
			b.Logf("%s: ax_tasks_indexed %.0f, RSS %.1f MiB", p.id, idx[i], float64(rss[i])/(1<<20))
		}
		meanRSS := float64(sumRSS) / 3
		b.Logf("%d pending: one replica alone indexes %.0f, RSS %.1f MiB; with 3, each %.1f MiB on average (%.2f of alone; bar: about 1/3 within 20%%)",
			n, soloIdx[0], float64(soloRSS[0])/(1<<20), meanRSS/(1<<20), meanRSS/float64(soloRSS[0]))
		b.ReportMetric(float64(soloRSS[0])/(1<<20), "MiB-alone")
		b.ReportMetric(meanRSS/(1<<20), "MiB-per-replica-of-3")
		b.ReportMetric(meanRSS/float64(soloRSS[0]), "ratio")
		b.ReportMetric((idx[0]+idx[1]+idx[2])/3/soloIdx[0], "indexed-ratio")
		for _, p := range three {
			p.shutdown(b)
		}
	}
}

// metricsBridge is a bridge subprocess with its Prometheus endpoint on a port the kernel picks.
type metricsBridge struct {
	*bridgeProc
}

func newMetricsBridge(b testing.TB, bin, id, url string) *metricsBridge {
	return &metricsBridge{newBridgeProc(b, bin, id, url)}
}

// indexed is the bridge's ax_tasks_indexed.
func (m *metricsBridge) indexed() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return scrape.Sum(ctx, m.metrics(), "ax_tasks_indexed")
}

// steady waits until the bridges' ax_tasks_indexed together cover the n tasks and have not moved
// for 3 s, then reads each one's gauge and RSS.
func steady(b testing.TB, ps []*metricsBridge, n int) ([]float64, []int64) {
	b.Helper()
	idx := make([]float64, len(ps))
	changed := time.Now()
	if !checkFor(10*time.Minute, func() bool {
		sum := 0.0
		for i, p := range ps {
			v, err := p.indexed()
			if err != nil {
				return false
			}
			if v != idx[i] {
				changed = time.Now()
			}
			idx[i], sum = v, sum+v
		}
		return sum >= float64(n) && time.Since(changed) >= 3*time.Second
	}) {
		b.Fatalf("index not steady: %v", idx)
	}
	rss := make([]int64, len(ps))
	for i, p := range ps {
		v, err := procs.RSS(p.pid())
		if err != nil {
			b.Fatal(err)
		}
		rss[i] = v
	}
	return idx, rss
}
