package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serverSet is one scenario side's nats-servers: a single node or a loopback cluster, each a
// subprocess with its own store directory under dir. Ports are fixed at start so that a node
// killed with SIGKILL comes back on the same ones.
type serverSet struct {
	bin   string
	dir   string
	sync  string // "always" or "default"
	nodes []*node
}

// node is one nats-server subprocess.
type node struct {
	name       string
	cfgPath    string
	clientPort int
	httpPort   int
	cmd        *exec.Cmd
	exited     chan struct{} // closed when cmd.Wait returned
}

// startServers starts n nodes (1: single server; 3: a cluster with routes on 127.0.0.1) in a new
// directory under parent and waits until every one reports JetStream healthy.
func startServers(ctx context.Context, bin, parent, syncMode string, n int) (*serverSet, error) {
	dir, err := os.MkdirTemp(parent, "side-")
	if err != nil {
		return nil, err
	}
	s := &serverSet{bin: bin, dir: dir, sync: syncMode}
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	if n > 1 {
		for i := range n {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+2]))
		}
	}
	for i := range n {
		nd := &node{name: fmt.Sprintf("n%d", i), clientPort: ports[3*i], httpPort: ports[3*i+1]}
		nd.cfgPath = filepath.Join(dir, nd.name+".conf")
		cfg := nodeConfig(nd, filepath.Join(dir, nd.name), syncMode, ports[3*i+2], routes)
		if err := os.WriteFile(nd.cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, nd)
	}
	for _, nd := range s.nodes {
		if err := s.spawn(nd); err != nil {
			s.close()
			return nil, err
		}
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// nodeConfig is a nats-server configuration file for one node.
func nodeConfig(nd *node, storeDir, syncMode string, routePort int, routes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n", nd.name, nd.clientPort, nd.httpPort)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", storeDir)
	if syncMode == "always" {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(routes) > 0 {
		fmt.Fprintf(&b, "cluster {\n  name: axbench\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", routePort, strings.Join(routes, ", "))
	}
	return b.String()
}

// freePorts asks the kernel for n free loopback ports (held until all are picked, so distinct).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// spawn starts nd's process; its output goes to a log file next to its config.
func (s *serverSet) spawn(nd *node) error {
	logf, err := os.OpenFile(filepath.Join(s.dir, nd.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-c", nd.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start nats-server %s: %w", nd.name, err)
	}
	nd.cmd, nd.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(nd.exited) }()
	return nil
}

// waitHealthy polls every node's /healthz until all say ok (JetStream enabled and, on a
// cluster, a meta leader with every node current).
func (s *serverSet) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, nd := range s.nodes {
		url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.httpPort)
		ok := poll(ctx, 20*time.Millisecond, func() bool {
			select {
			case <-nd.exited:
				return true // reported below
			default:
			}
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		select {
		case <-nd.exited:
			return fmt.Errorf("nats-server %s exited at start: see %s", nd.name, filepath.Join(s.dir, nd.name+".log"))
		default:
		}
		if !ok {
			return fmt.Errorf("nats-server %s not healthy: %w", nd.name, context.Cause(ctx))
		}
	}
	return nil
}

// url is every node's client URL, comma-joined, node 0 first.
func (s *serverSet) url() string {
	urls := make([]string, len(s.nodes))
	for i, nd := range s.nodes {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(nd.clientPort)
	}
	return strings.Join(urls, ",")
}

// replicas is the replica count for streams and buckets on this set.
func (s *serverSet) replicas() int { return len(s.nodes) }

// kill9 kills every node with SIGKILL and waits for the processes to end.
func (s *serverSet) kill9() {
	for _, nd := range s.nodes {
		if nd.cmd != nil && nd.cmd.Process != nil {
			_ = nd.cmd.Process.Kill()
		}
	}
	for _, nd := range s.nodes {
		if nd.exited != nil {
			<-nd.exited
		}
	}
}

// restart starts every node again on its store directory and ports (after kill9).
func (s *serverSet) restart(ctx context.Context) error {
	for _, nd := range s.nodes {
		if err := s.spawn(nd); err != nil {
			return err
		}
	}
	return s.waitHealthy(ctx)
}

// rss is the sum of the nodes' resident set sizes in bytes (Linux /proc; an error elsewhere).
func (s *serverSet) rss() (int64, error) {
	var sum int64
	for _, nd := range s.nodes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", nd.cmd.Process.Pid))
		if err != nil {
			return 0, err
		}
		found := false
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					return 0, err
				}
				sum += kb << 10
				found = true
			}
		}
		if !found {
			return 0, errors.New("no VmRSS in /proc status")
		}
	}
	return sum, nil
}

// close stops every node (SIGKILL: the data is thrown away) and removes the directory.
func (s *serverSet) close() {
	s.kill9()
	_ = os.RemoveAll(s.dir)
}

// buildServer builds nats-server from this module's dependency into dir.
func buildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server (run from the axbridge module, or pass --nats-server): %v\n%s", err, out)
	}
	return bin, nil
}

// poll calls cond every interval until it returns true (true) or ctx ends (false).
func poll(ctx context.Context, interval time.Duration, cond func() bool) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// retry calls f, each call bounded by 5 s, every interval until it succeeds or within has
// passed; it returns f's last error. For JetStream calls right after servers start or restart,
// when a request can go unanswered until the cluster has placed or recovered the asset.
func retry(ctx context.Context, within, interval time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var err error
	poll(ctx, interval, func() bool {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err = f(actx)
		return err == nil
	})
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return err
}
