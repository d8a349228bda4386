package scrape

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"kind"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y"})
	reg.MustRegister(c, g)
	c.WithLabelValues("a").Add(2)
	c.WithLabelValues("b").Add(3)
	g.Set(7)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	ctx := context.Background()
	for name, want := range map[string]float64{"x_total": 5, "y": 7} {
		if got, err := Sum(ctx, srv.URL, name); err != nil || got != want {
			t.Errorf("Sum(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := Sum(ctx, srv.URL, "z"); err == nil {
		t.Error("Sum of a metric the endpoint does not show: no error")
	}
}
