// Package scrape reads a Prometheus endpoint, for tests that check a service's metrics.
package scrape

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sum is the sum of every sample of the metric name (a counter or gauge, any labels) at the
// endpoint url; a name the endpoint does not show is an error.
func Sum(ctx context.Context, url, name string) (float64, error) {
	if url == "" {
		return 0, fmt.Errorf("no metrics URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	fam, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("%s shows no %s", url, name)
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum, nil
}
