// Package procs runs nats-server subprocesses for tests and the bench: a single node or a
// loopback cluster, each node with its own store directory and fixed ports, so that a node killed
// with SIGKILL comes back on the same ones. It also reads a process's resident set size.
package procs

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Cluster.
type Options struct {
	// Sync is the nodes' sync_interval: "always" fsyncs every JetStream write; anything else keeps
	// the server's default.
	Sync string
	// Nodes is the node count: 1 is a single server, more a cluster with routes on 127.0.0.1.
	Nodes int
	// NoAdvertise keeps the nodes from telling clients about the other nodes' URLs, so that a
	// client only ever connects to the URLs it was given (a client behind a proxy stays behind it).
	NoAdvertise bool
	// Profile gives every node a profiling port (prof_port: Go's net/http/pprof handlers), for
	// Node.CPUProfile.
	Profile bool
}

// Cluster is a set of nats-server subprocesses.
type Cluster struct {
	bin   string
	dir   string
	nodes []*Node
}

// Node is one nats-server subprocess.
type Node struct {
	Name       string
	ClientPort int
	HTTPPort   int
	ProfPort   int // 0 unless Options.Profile
	cfgPath    string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returned
}

// Start starts the nodes in a new directory under parent and waits (a minute at most) until every
// one reports JetStream healthy.
func Start(ctx context.Context, bin, parent string, o Options) (*Cluster, error) {
	n := max(o.Nodes, 1)
	dir, err := os.MkdirTemp(parent, "nats-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	ports, err := FreePorts(4 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	if n > 1 {
		for i := range n {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[4*i+2]))
		}
	}
	for i := range n {
		nd := &Node{Name: fmt.Sprintf("n%d", i), ClientPort: ports[4*i], HTTPPort: ports[4*i+1]}
		if o.Profile {
			nd.ProfPort = ports[4*i+3]
		}
		nd.cfgPath = filepath.Join(dir, nd.Name+".conf")
		cfg := nodeConfig(nd, filepath.Join(dir, nd.Name), o, ports[4*i+2], routes)
		if err := os.WriteFile(nd.cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := c.spawn(nd); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, nd := range c.nodes {
		if err := c.waitHealthy(ctx, nd); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// nodeConfig is a nats-server configuration file for one node.
func nodeConfig(nd *Node, storeDir string, o Options, routePort int, routes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n", nd.Name, nd.ClientPort, nd.HTTPPort)
	if nd.ProfPort != 0 {
		fmt.Fprintf(&b, "prof_port: %d\n", nd.ProfPort)
	}
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", storeDir)
	if o.Sync == "always" {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(routes) > 0 {
		fmt.Fprintf(&b, "cluster {\n  name: axprocs\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n", routePort, strings.Join(routes, ", "))
		if o.NoAdvertise {
			b.WriteString("  no_advertise: true\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// FreePorts asks the kernel for n free loopback ports (held until all are picked, so distinct).
func FreePorts(n int) ([]int, error) {
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
func (c *Cluster) spawn(nd *Node) error {
	logf, err := os.OpenFile(filepath.Join(c.dir, nd.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "-c", nd.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	SetChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start nats-server %s: %w", nd.Name, err)
	}
	exited := make(chan struct{})
	nd.mu.Lock()
	nd.cmd, nd.exited = cmd, exited
	nd.mu.Unlock()
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	return nil
}

// waitHealthy polls nd's /healthz (a minute at most) until it says ok: JetStream enabled and, on
// a cluster, a meta leader with the node current.
func (c *Cluster) waitHealthy(ctx context.Context, nd *Node) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.HTTPPort)
	exited := nd.done()
	ok := Poll(ctx, 20*time.Millisecond, func() bool {
		select {
		case <-exited:
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
	case <-exited:
		return fmt.Errorf("nats-server %s exited at start: see %s", nd.Name, filepath.Join(c.dir, nd.Name+".log"))
	default:
	}
	if !ok {
		return fmt.Errorf("nats-server %s not healthy: %w", nd.Name, context.Cause(ctx))
	}
	return nil
}

func (nd *Node) done() chan struct{} {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.exited
}

// Pid is the node's current process id (0 before it started).
func (nd *Node) Pid() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil || nd.cmd.Process == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// URL is the node's client URL.
func (nd *Node) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(nd.ClientPort) }

// CPUProfile writes a CPU profile of the node's next d (whole seconds, at least one) into file,
// from its profiling port (Options.Profile).
func (nd *Node) CPUProfile(ctx context.Context, d time.Duration, file string) error {
	if nd.ProfPort == 0 {
		return fmt.Errorf("nats-server %s has no profiling port", nd.Name)
	}
	sec := max(int((d+time.Second-1)/time.Second), 1)
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", nd.ProfPort, sec)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile nats-server %s: %w", nd.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile nats-server %s: %s", nd.Name, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("profile nats-server %s: %w", nd.Name, err)
	}
	return f.Close()
}

// Nodes are the cluster's nodes, n0 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, nd := range c.nodes {
		if nd.Name == name {
			return nd
		}
	}
	return nil
}

// URL is every node's client URL, comma-joined, node 0 first.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = nd.URL()
	}
	return strings.Join(urls, ",")
}

// Replicas is the replica count for streams and buckets on this cluster.
func (c *Cluster) Replicas() int { return len(c.nodes) }

// Kill9 kills nd with SIGKILL and waits for its process to end.
func (c *Cluster) Kill9(nd *Node) {
	nd.mu.Lock()
	cmd, exited := nd.cmd, nd.exited
	nd.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts nd again on its store directory and ports (after Kill9) and waits until it is
// healthy.
func (c *Cluster) Restart(ctx context.Context, nd *Node) error {
	if err := c.spawn(nd); err != nil {
		return err
	}
	return c.waitHealthy(ctx, nd)
}

// Kill9All kills every node with SIGKILL and waits for the processes to end.
func (c *Cluster) Kill9All() {
	for _, nd := range c.nodes {
		nd.mu.Lock()
		if nd.cmd != nil && nd.cmd.Process != nil {
			_ = nd.cmd.Process.Kill()
		}
		nd.mu.Unlock()
	}
	for _, nd := range c.nodes {
		if ch := nd.done(); ch != nil {
			<-ch
		}
	}
}

// RestartAll starts every node again on its store directory and ports (after Kill9All).
func (c *Cluster) RestartAll(ctx context.Context) error {
	for _, nd := range c.nodes {
		if err := c.spawn(nd); err != nil {
			return err
		}
	}
	for _, nd := range c.nodes {
		if err := c.waitHealthy(ctx, nd); err != nil {
			return err
		}
	}
	return nil
}

// RSS is the sum of the nodes' resident set sizes in bytes.
func (c *Cluster) RSS() (int64, error) { return sumNodes(c, RSS) }

// Close stops every node (SIGKILL: the data is thrown away) and removes the directory.
func (c *Cluster) Close() {
	c.Kill9All()
	_ = os.RemoveAll(c.dir)
}

// RSS is the resident set size of process pid in bytes (Linux /proc; an error elsewhere).
func RSS(pid int) (int64, error) {
	v, err := procStatus(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}

// CPU is the sum of the nodes' user and system CPU time so far (Linux /proc; an error elsewhere).
func (c *Cluster) CPU() (time.Duration, error) { return sumNodes(c, CPU) }

// sumNodes is the sum of f over the nodes' processes.
func sumNodes[T int64 | time.Duration](c *Cluster, f func(pid int) (T, error)) (T, error) {
	var sum T
	for _, nd := range c.nodes {
		v, err := f(nd.Pid())
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// CPU is process pid's user and system CPU time so far, from /proc/<pid>/stat's utime and stime
// (in clock ticks of 1/100 s, USER_HZ on Linux).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) is in parentheses and may hold spaces: count from after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime and stime: fields 14 and 15 of stat, 12 and 13 after the command
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Stopped reports whether process pid is stopped by a signal (SIGSTOP): a signal is delivered
// asynchronously, so a process signalled may still run for a while (Linux /proc; an error elsewhere).
func Stopped(pid int) (bool, error) {
	v, err := procStatus(pid, "State")
	return strings.HasPrefix(v, "T"), err
}

// procStatus is the value of field in /proc/<pid>/status, trimmed.
func procStatus(pid int, field string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc status", field)
}

// BuildServer builds nats-server from the calling module's dependency into dir.
func BuildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server (run from the axbridge module): %v\n%s", err, out)
	}
	return bin, nil
}

// Poll calls cond every interval until it returns true (true) or ctx ends (false).
func Poll(ctx context.Context, interval time.Duration, cond func() bool) bool {
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
