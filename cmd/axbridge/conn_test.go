package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
)

// pauseProxy forwards TCP connections to a server and, while paused, forwards nothing either way
// and leaves the connections open, as a network partition or a hung server would: the client
// learns of it only by its pings going unanswered.
type pauseProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed when the pause ends
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newPauseProxy(t *testing.T, target string) *pauseProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pauseProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *pauseProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *pauseProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.conns == nil {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
func (p *pauseProxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			paused, resume := p.paused, p.resume
			p.mu.Unlock()
			if paused {
				<-resume
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pauseProxy) setPaused(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case paused && !p.paused:
		p.paused, p.resume = true, make(chan struct{})
	case !paused && p.paused:
		p.paused = false
		close(p.resume)
	}
}

func (p *pauseProxy) close() {
	p.setPaused(false)
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// A bridge whose server stops answering (the connection stays open) turns not ready once its
// client's pings go unanswered, and ready again once the server answers. The test shortens the
// ping interval; the default options are checked separately.
func TestReadyzWhenServerStopsAnswering(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	plain, err := connect(options{natsURL: srv.ClientURL()}, nil, discard)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Opts.PingInterval != pingInterval || plain.Opts.MaxPingsOut != pingsOut {
		t.Errorf("connect: ping every %v, %d outstanding; want %v, %d", plain.Opts.PingInterval, plain.Opts.MaxPingsOut, pingInterval, pingsOut)
	}
	plain.Close()

	proxy := newPauseProxy(t, srv.NATS().Addr().String())
	nc, err := connect(options{natsURL: proxy.url()}, nil, discard, nats.PingInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	hc := &health{}
	base := serveHealth(t, prometheus.NewRegistry(), hc)
	b, err := bridge.New(nc, openStore(t, nc), bridge.Config{ReplicaID: "stall-1", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	hc.set(b)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopBridge(t, b) })
	expect(t, base, "/readyz", http.StatusOK, "ok")

	proxy.setPaused(true)
	var code int
	var body string
	if !poll(time.Minute, func() bool {
		code, body = get(base + "/readyz")
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatalf("after the server stopped answering, /readyz: %d %q", code, body)
	}
	t.Logf("/readyz: %d %q", code, body)
	proxy.setPaused(false)
	expect(t, base, "/readyz", http.StatusOK, "ok")
}
