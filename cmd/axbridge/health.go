package main

import (
	"net/http"
	"sync/atomic"

	"github.com/axbridge/axbridge/bridge"
)

// health serves /healthz and /readyz on the metrics listener. The listener is bound before NATS
// is connected; until the bridge exists both answer 503.
//
//   - /healthz: 200 while the bridge runs, takes schedule messages, watches the bucket and its NATS
//     connection is not closed (bridge.Health); a liveness check.
//   - /readyz: 200 once /healthz is, the initial load of the bucket is done and NATS is connected
//     (bridge.Readiness); a readiness check.
//
// A 503 carries the reason as a line of text.
type health struct{ b atomic.Pointer[bridge.Bridge] }

func (h *health) set(b *bridge.Bridge) { h.b.Store(b) }

func (h *health) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", h.handler((*bridge.Bridge).Health))
	mux.HandleFunc("GET /readyz", h.handler((*bridge.Bridge).Readiness))
}

func (h *health) handler(check func(*bridge.Bridge) error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		b := h.b.Load()
		if b == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("starting: not connected to NATS yet\n"))
			return
		}
		if err := check(b); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
