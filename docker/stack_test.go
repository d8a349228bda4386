//go:build docker

package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The services of compose.yaml.
var (
	natsServices   = []string{"nats-1", "nats-2", "nats-3"}
	bridgeServices = []string{"bridge-1", "bridge-2"}
)

// stack is one run of compose.yaml under its own project name, with its own images, host ports
// and passwords. Everything it starts, down removes (containers, network, volumes, images).
type stack struct {
	t            *testing.T
	project      string
	env          []string
	passwords    map[string]string // user → password
	natsPorts    []int             // host ports of nats-1..3's client port
	monPorts     []int             // host ports of nats-1..3's monitoring port
	metricsPorts map[string]int    // host port of each bridge service's /metrics
	images       []string

	lastUnhealthy string // waitHealthy's last failure before success

	mu  sync.Mutex
	ids map[string]string // service → container id
}

func newStack(t *testing.T) *stack {
	suffix := randHex(t, 4)
	s := &stack{
		t:         t,
		project:   "axcompose" + suffix,
		passwords: map[string]string{},
		ids:       map[string]string{},
		images:    []string{"axbridge:test-" + suffix, "axbridge-nats:test-" + suffix},
	}
	ports := freePorts(t, 8)
	s.natsPorts, s.monPorts = ports[0:3], ports[3:6]
	vars := []string{"AX_BRIDGE_IMAGE=" + s.images[0], "NATS_IMAGE=" + s.images[1]}
	for i := range 3 {
		vars = append(vars, fmt.Sprintf("AX_NATS_PORT_%d=%d", i+1, s.natsPorts[i]), fmt.Sprintf("AX_NATS_MONITOR_PORT_%d=%d", i+1, s.monPorts[i]))
	}
	vars = append(vars, fmt.Sprintf("AX_BRIDGE_METRICS_PORT_1=%d", ports[6]), fmt.Sprintf("AX_BRIDGE_METRICS_PORT_2=%d", ports[7]))
	s.metricsPorts = map[string]int{"bridge-1": ports[6], "bridge-2": ports[7]}
	for _, user := range []string{"bridge", "producer", "consumer", "operator"} {
		s.passwords[user] = randHex(t, 16)
		vars = append(vars, "AX_"+strings.ToUpper(user)+"_PASSWORD="+s.passwords[user])
	}
	s.env = append(os.Environ(), vars...)
	return s
}

// requireDocker fails the test (never skips it) when there is no Docker daemon or no docker-compose.
func requireDocker(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("this test needs a Docker daemon: docker info: %v: %s", err, out)
	}
	if out, err := exec.Command("docker-compose", "version", "--short").CombinedOutput(); err != nil {
		t.Fatalf("this test needs docker-compose: %v: %s", err, out)
	}
}

// build builds the binaries and both images with build.sh, under this stack's image tags.
func (s *stack) build(ctx context.Context) {
	s.t.Helper()
	cmd := exec.CommandContext(ctx, "./build.sh")
	cmd.Env = s.env
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("build.sh: %v\n%s", err, out)
	}
}

// up starts the stack and waits until every service is healthy; down is registered first.
func (s *stack) up(ctx context.Context) {
	s.t.Helper()
	s.t.Cleanup(s.down)
	if out, err := s.compose(ctx, "up", "-d"); err != nil {
		s.t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	if _, err := s.waitHealthy(ctx, 3*time.Minute); err != nil {
		s.t.Fatal(err)
	}
}

// down saves every service's log to build/<project>.log (gitignored), shows the last lines when
// the test failed, then removes everything, volumes included.
func (s *stack) down() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := s.compose(ctx, "logs", "--no-color", "--timestamps"); err == nil {
		path := filepath.Join("build", s.project+".log")
		if err := os.WriteFile(path, []byte(out), 0o644); err == nil {
			s.t.Logf("service logs saved in docker/%s", path)
		}
	}
	if s.t.Failed() {
		out, _ := s.compose(ctx, "logs", "--no-color", "--timestamps", "--tail", "150")
		s.t.Logf("docker-compose logs (last lines):\n%s", out)
	}
	if out, err := s.compose(ctx, "down", "-v", "--remove-orphans", "-t", "10"); err != nil {
		s.t.Errorf("docker-compose down -v: %v\n%s", err, out)
	}
	if out, err := s.docker(ctx, append([]string{"rmi"}, s.images...)...); err != nil {
		s.t.Logf("docker rmi: %v\n%s", err, out)
	}
}

func (s *stack) compose(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-f", "compose.yaml", "-p", s.project}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *stack) docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return string(out), err
}

// container is the id of service's container (the same across stop, start and restart).
func (s *stack) container(ctx context.Context, service string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := s.ids[service]; id != "" {
		return id, nil
	}
	out, err := s.compose(ctx, "ps", "-q", service)
	id := strings.TrimSpace(out)
	if err != nil || id == "" {
		return "", fmt.Errorf("container of %s: %v %s", service, err, out)
	}
	s.ids[service] = id
	return id, nil
}

// network is the project's default network, which every service is on.
func (s *stack) network() string { return s.project + "_default" }

// healthy runs the image's probe inside service's container, as its health check does, so that
// it works whatever the container's network state.
func (s *stack) healthy(ctx context.Context, service string) error {
	id, err := s.container(ctx, service)
	if err != nil {
		return err
	}
	urls := []string{"http://127.0.0.1:8222/healthz"}
	if strings.HasPrefix(service, "bridge") {
		urls = []string{"http://127.0.0.1:9464/healthz", "http://127.0.0.1:9464/readyz"}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := s.docker(pctx, append([]string{"exec", id, "/probe"}, urls...)...); err != nil {
		return fmt.Errorf("%s: %v: %s", service, err, strings.TrimSpace(out))
	}
	return nil
}

// waitHealthy polls every service until all are healthy at once, and says how long that took;
// s.lastUnhealthy keeps the last failure seen before (what was slowest to come back).
func (s *stack) waitHealthy(ctx context.Context, within time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(within)
	s.lastUnhealthy = ""
	for {
		var last error
		for _, svc := range append(append([]string{}, natsServices...), bridgeServices...) {
			if err := s.healthy(ctx, svc); err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return time.Since(start), nil
		}
		s.lastUnhealthy = last.Error()
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not healthy within %v: %v", within, last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond): // poll interval
		}
	}
}

// streamLeader is the server name of the leader of stream (in the $G account), from any node's
// monitoring port that answers.
func (s *stack) streamLeader(ctx context.Context, stream string) (string, error) {
	var errs []string
	for _, port := range s.monPorts {
		leader, err := leaderAt(ctx, port, stream)
		if err == nil && leader != "" {
			return leader, nil
		}
		errs = append(errs, fmt.Sprint(err))
	}
	return "", fmt.Errorf("leader of %s: %s", stream, strings.Join(errs, "; "))
}

func leaderAt(ctx context.Context, port int, stream string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", port), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", err
	}
	for _, a := range jsz.Accounts {
		for _, st := range a.Streams {
			if st.Name == stream {
				return st.Cluster.Leader, nil
			}
		}
	}
	return "", fmt.Errorf("stream %s not on :%d", stream, port)
}

// natsURLs lists the three published client ports.
func (s *stack) natsURLs() string {
	var urls []string
	for _, p := range s.natsPorts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(urls, ",")
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
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
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
