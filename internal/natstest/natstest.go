// Package natstest runs in-process NATS servers with JetStream for tests: a single server that
// can be restarted on the same store directory, and a small loopback cluster for the replicated
// (R3) paths. Servers are quiet unless the test binary runs with -natstest.log.
package natstest

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

var logFlag = flag.Bool("natstest.log", false, "natstest: write nats-server logs through t.Log")

// readyTimeout bounds every wait for a server or cluster to come up.
const readyTimeout = 30 * time.Second

// Option changes the options of a server before it starts.
type Option func(*server.Options)

// WithServerName names the server (otherwise nats-server picks an id).
func WithServerName(name string) Option {
	return func(o *server.Options) { o.ServerName = name }
}

// WithLogs sends the server's log to t.Log, as -natstest.log does for every server.
func WithLogs() Option {
	return func(o *server.Options) { o.NoLog = false }
}

// WithMaxPayload sets the server's max_payload in bytes.
func WithMaxPayload(n int32) Option {
	return func(o *server.Options) { o.MaxPayload = n }
}

// Server is one in-process nats-server with JetStream.
type Server struct {
	// StoreDir is the JetStream store directory; it survives Restart.
	StoreDir string

	mu   sync.Mutex
	opts server.Options // as last started, with the port that was bound
	srv  *server.Server
}

// RunServer starts a JetStream server on 127.0.0.1 with a random port and a store in t.TempDir(),
// waits until it accepts clients, and shuts it down when the test ends.
func RunServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := baseOptions(t.TempDir())
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{StoreDir: o.StoreDir}
	srv, err := start(t, &o)
	if err != nil {
		t.Fatalf("natstest: start server: %v", err)
	}
	s.srv, s.opts = srv, o
	t.Cleanup(func() { s.shutdown() })
	return s
}

// ClientURL is the URL a client connects to.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv.ClientURL()
}

// NATS is the running nats-server, for tests that need its internals.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Restart shuts the server down, waits for it to stop, and starts a new one on the same store
// directory (and the same port unless another process took it), then waits until JetStream is
// ready. Clients with reconnects enabled reconnect by themselves when the port is the same.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.opts
	srv, err := start(t, &o)
	if err != nil {
		// The port may be gone; take any.
		o.Port = -1
		srv, err = start(t, &o)
	}
	if err != nil {
		t.Fatalf("natstest: restart server: %v", err)
	}
	s.srv, s.opts = srv, o
}

// Shutdown stops the server and waits for it (Cleanup does it too; calling both is fine).
func (s *Server) Shutdown() { s.shutdown() }

func (s *Server) shutdown() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	srv.Shutdown()
	srv.WaitForShutdown()
}

func baseOptions(storeDir string) server.Options {
	return server.Options{
		Host:                  "127.0.0.1",
		Port:                  -1,
		HTTPPort:              0,
		NoLog:                 !*logFlag,
		NoSigs:                true,
		MaxControlLine:        4096,
		DisableShortFirstPing: true,
		JetStream:             true,
		StoreDir:              storeDir,
	}
}

// start creates and starts a server with o, waits until it accepts clients and JetStream is
// enabled, and writes the bound client port back into o.
func start(t testing.TB, o *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	if !o.NoLog {
		srv.SetLogger(&testLogger{t: t, name: srv.Name()}, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("server %s not ready for connections within %v", srv.Name(), readyTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("server %s started without JetStream", srv.Name())
	}
	if addr, ok := srv.Addr().(*net.TCPAddr); ok {
		o.Port = addr.Port
	}
	return srv, nil
}

// Connect connects to url (one URL or a comma-separated list) and closes the connection when the
// test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Cluster is a JetStream cluster of in-process servers on loopback.
type Cluster struct {
	Servers []*Server
}

// RunCluster starts n JetStream servers routed to each other on loopback (random ports, one store
// directory each), waits until there is a meta leader, all n peers are known and every server is
// current, and shuts them all down when the test ends.
//
// Every server routes to the first, which tells them of each other. Only the first one's route
// port is picked in advance (JetStream needs a configured route before the server starts, and it
// may name the server itself); it is held open until just before that server starts. The others
// listen on ports the kernel picks. (Picking every port up front and closing them raced with
// anything else binding a port, other test packages included: a server whose port was taken
// meanwhile never became ready.)
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: cluster of %d servers", n)
	}
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	seedPort := hold.Addr().(*net.TCPAddr).Port
	routes := []*url.URL{{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", seedPort)}}
	name := fmt.Sprintf("C%d", time.Now().UnixNano()%1e6)
	c := &Cluster{}
	for i := range n {
		o := baseOptions(t.TempDir())
		o.ServerName = fmt.Sprintf("%s-S%d", name, i+1)
		o.Cluster = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: -1}
		if i == 0 {
			o.Cluster.Port = seedPort
		}
		o.Routes = routes
		for _, opt := range opts {
			opt(&o)
		}
		srv, err := server.NewServer(&o)
		if err != nil {
			t.Fatalf("natstest: cluster server %d: %v", i+1, err)
		}
		if !o.NoLog {
			srv.SetLogger(&testLogger{t: t, name: o.ServerName}, false, false)
		}
		s := &Server{StoreDir: o.StoreDir, opts: o, srv: srv}
		t.Cleanup(s.shutdown)
		if i == 0 {
			hold.Close()
		}
		srv.Start()
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if !s.srv.ReadyForConnections(readyTimeout) {
			t.Fatalf("natstest: cluster server %s not ready within %v", s.srv.Name(), readyTimeout)
		}
	}
	if err := c.waitReady(n); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return c
}

// ClientURLs is every server's client URL, comma-joined for nats.Connect.
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Leader is the JetStream meta leader, or nil if there is none right now.
func (c *Cluster) Leader() *Server {
	for _, s := range c.Servers {
		if s.NATS().JetStreamIsLeader() {
			return s
		}
	}
	return nil
}

func (c *Cluster) waitReady(n int) error {
	var last string
	ok := poll(readyTimeout, func() bool {
		l := c.Leader()
		if l == nil {
			last = "no meta leader"
			return false
		}
		if peers := len(l.NATS().JetStreamClusterPeers()); peers != n {
			last = fmt.Sprintf("meta leader sees %d of %d peers", peers, n)
			return false
		}
		for _, s := range c.Servers {
			if !s.NATS().JetStreamIsCurrent() {
				last = fmt.Sprintf("server %s is not current", s.NATS().Name())
				return false
			}
		}
		return true
	})
	if !ok {
		return fmt.Errorf("cluster not ready within %v: %s", readyTimeout, last)
	}
	return nil
}

// poll calls cond every few milliseconds until it returns true or d passes.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// testLogger routes server logs to t.Log.
type testLogger struct {
	t    testing.TB
	name string
}

func (l *testLogger) logf(level, format string, v ...any) {
	l.t.Logf("[%s] %s %s", l.name, level, fmt.Sprintf(format, v...))
}
func (l *testLogger) Noticef(format string, v ...any) { l.logf("INF", format, v...) }
func (l *testLogger) Warnf(format string, v ...any)   { l.logf("WRN", format, v...) }
func (l *testLogger) Fatalf(format string, v ...any)  { l.logf("FTL", format, v...) }
func (l *testLogger) Errorf(format string, v ...any)  { l.logf("ERR", format, v...) }
func (l *testLogger) Debugf(format string, v ...any)  { l.logf("DBG", format, v...) }
func (l *testLogger) Tracef(format string, v ...any)  { l.logf("TRC", format, v...) }
