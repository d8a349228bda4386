package ui

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// The lateness chart: the page samples each bizType's p50 and p99 (over the alarm window, as
// stats gives them) every Config.SampleEvery and keeps historySpan of them.
const (
	sampleEvery = 10 * time.Second
	historySpan = 15 * time.Minute
)

type sample struct {
	at       time.Time
	p50, p99 map[string]time.Duration
}

// history is the samples of the last historySpan; safe for concurrent use.
type history struct {
	mu      sync.Mutex
	samples []sample
}

func (h *history) add(at time.Time, st *stats) {
	s := sample{at: at, p50: map[string]time.Duration{}, p99: map[string]time.Duration{}}
	for biz, b := range st.BizTypes {
		if b.Lateness == nil {
			continue
		}
		if d, err := time.ParseDuration(b.Lateness.P50); err == nil {
			s.p50[biz] = d
		}
		if d, err := time.ParseDuration(b.Lateness.P99); err == nil {
			s.p99[biz] = d
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := h.samples[:0]
	for _, o := range h.samples {
		if at.Sub(o.at) <= historySpan {
			keep = append(keep, o)
		}
	}
	h.samples = append(keep, s)
}

// chart is one bizType's lateness chart, drawn as SVG by the template.
type chart struct {
	BizType  string
	P50, P99 string // polyline points
	Max      string // the y axis' top
	Last     string // the latest p99
	Span     string // how far back the chart goes
	Samples  int
}

// chart geometry, in SVG user units
const (
	chartW, chartH = 600.0, 140.0
	chartPad       = 4.0
)

// charts draws every bizType seen in the samples, sorted by name.
func (h *history) charts(now time.Time) []chart {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := map[string]bool{}
	for _, s := range h.samples {
		for biz := range s.p99 {
			names[biz] = true
		}
	}
	var out []chart
	for biz := range names {
		out = append(out, h.chartOf(biz, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BizType < out[j].BizType })
	return out
}

func (h *history) chartOf(biz string, now time.Time) chart {
	var top time.Duration
	c := chart{BizType: biz}
	for _, s := range h.samples {
		if d, ok := s.p99[biz]; ok {
			top = max(top, d, s.p50[biz])
			c.Samples++
			c.Last = d.String()
		}
	}
	top = niceTop(top)
	c.Max = top.String()
	var p50, p99 []string
	for _, s := range h.samples {
		d, ok := s.p99[biz]
		if !ok {
			continue
		}
		x := chartPad + (chartW-2*chartPad)*(1-float64(now.Sub(s.at))/float64(historySpan))
		p50 = append(p50, point(x, s.p50[biz], top))
		p99 = append(p99, point(x, d, top))
	}
	c.P50, c.P99 = strings.Join(p50, " "), strings.Join(p99, " ")
	c.Span = historySpan.String()
	if len(h.samples) > 0 {
		c.Span = now.Sub(h.samples[0].at).Round(time.Second).String()
	}
	return c
}

func point(x float64, d, top time.Duration) string {
	y := chartH - chartPad - (chartH-2*chartPad)*float64(d)/float64(top)
	return fmt.Sprintf("%.1f,%.1f", math.Max(x, chartPad), y)
}

// niceTop rounds d up to 1, 2 or 5 times a power of ten milliseconds (at least 1 ms).
func niceTop(d time.Duration) time.Duration {
	top := time.Millisecond
	for top < d {
		switch s := fmt.Sprint(int64(top / time.Millisecond)); s[0] {
		case '1':
			top *= 2
		case '2':
			top = top / 2 * 5
		default:
			top *= 2
		}
	}
	return top
}
