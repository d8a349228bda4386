package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// CutProxy forwards TCP connections from its own loopback port to target until it is cut: then
// it closes every connection it carries and refuses new ones (accepts and closes them at once)
// until it is restored. Tests cut a client off NATS with it.
type CutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewCutProxy listens on a free loopback port and forwards to target (host:port); closed when
// the test ends.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's NATS URL.
func (p *CutProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *CutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.cut
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut || p.conns == nil {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies from src to dst until either side ends, then closes both.
func (p *CutProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// SetCut cuts (true) or restores (false) the proxy.
func (p *CutProxy) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

func (p *CutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
