package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/axbridge/axbridge/internal/procs"
)

// serverSet is one scenario side's nats-servers: a single node or a loopback cluster of
// subprocesses (internal/procs), each with its own store directory.
type serverSet struct {
	*procs.Cluster
}

// startServers starts n nodes (1: single server; 3: a cluster with routes on 127.0.0.1) in a new
// directory under parent and waits until every one reports JetStream healthy; with profile, each
// has a profiling port (procs.Options.Profile).
func startServers(ctx context.Context, bin, parent, syncMode string, n int, profile bool) (*serverSet, error) {
	c, err := procs.Start(ctx, bin, parent, procs.Options{Sync: syncMode, Nodes: n, Profile: profile})
	if err != nil {
		return nil, err
	}
	return &serverSet{c}, nil
}

// url is every node's client URL, comma-joined, node 0 first.
func (s *serverSet) url() string { return s.URL() }

// replicas is the replica count for streams and buckets on this set.
func (s *serverSet) replicas() int { return s.Replicas() }

// kill9 kills every node with SIGKILL and waits for the processes to end.
func (s *serverSet) kill9() { s.Kill9All() }

// restart starts every node again on its store directory and ports (after kill9).
func (s *serverSet) restart(ctx context.Context) error { return s.RestartAll(ctx) }

// rss is the sum of the nodes' resident set sizes in bytes (Linux /proc; an error elsewhere).
func (s *serverSet) rss() (int64, error) { return s.RSS() }

// close stops every node (SIGKILL: the data is thrown away) and removes the directory.
func (s *serverSet) close() { s.Close() }

// buildServer builds nats-server from this module's dependency into dir.
func buildServer(ctx context.Context, dir string) (string, error) {
	bin, err := procs.BuildServer(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("%w (or pass --nats-server)", err)
	}
	return bin, nil
}

// poll calls cond every interval until it returns true (true) or ctx ends (false).
func poll(ctx context.Context, interval time.Duration, cond func() bool) bool {
	return procs.Poll(ctx, interval, cond)
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
