package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/natstest"
)

// axcli runs the CLI and returns its exit code and output.
func axcli(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cliMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustCLI runs the CLI, fails the test on an error exit and checks the output matches want.
func mustCLI(t *testing.T, want string, args ...string) string {
	t.Helper()
	code, out, errs := axcli(args...)
	if code != 0 || !regexp.MustCompile(want).MatchString(out) {
		t.Fatalf("axbridge %s: exit %d, stdout %q, stderr %q; want stdout to match %q", strings.Join(args, " "), code, out, errs, want)
	}
	return out
}

// The CLI as an operator uses it against a running bridge: read, list, count, pause, bulk-requeue
// with a dry run first, move and cancel a task, the replicas, a natscli context, and clear errors.
// Not parallel: it sets XDG_CONFIG_HOME for the context.
func TestCLI(t *testing.T) {
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	nc := natstest.Connect(t, url)
	b, err := bridge.New(natstest.Connect(t, url), openStore(t, nc), bridge.Config{ReplicaID: "cli-r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer stopBridge(t, b)
	<-b.Ready()
	sub, _ := nc.Subscribe("ax.fire.pay", func(m *nats.Msg) { _ = m.Term() })
	defer func() { _ = sub.Unsubscribe() }()
	js, _ := nc.JetStream()
	for id, h := range map[string][2]string{"cli-1": {"orders", "1h"}, "cli-dead": {"pay", "0s"}} {
		m := nats.NewMsg("ax.schedule." + h[0])
		m.Header.Set(bridge.HeaderTaskID, id)
		m.Header.Set(bridge.HeaderDelay, h[1])
		m.Header.Set(bridge.HeaderMaxRetry, "0")
		m.Data = []byte(`{"n":1}`)
		if _, err := js.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	u := "--nats-url=" + url
	if !poll(10*time.Second, func() bool {
		_, out, _ := axcli("task", "get", "cli-dead", u)
		return strings.Contains(out, "DEAD")
	}) {
		t.Fatal("cli-dead never DEAD")
	}
	mustCLI(t, `status\s+WAITING`, "task", "get", "cli-1", u)
	mustCLI(t, `cli-1\s+orders\s+WAITING`, "task", "list", u, "--biz", "orders")
	mustCLI(t, `cli-dead\s+pay\s+DEAD`, "task", "list", "--status", "dead", u)
	out := mustCLI(t, `"tasks"`, "task", "list", u, "--json", "--limit", "1")
	var page struct{ Tasks []struct{ ID string } }
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Tasks) != 1 {
		t.Errorf("--json list: %v %s", err, out)
	}
	mustCLI(t, `(?m)^orders\s+1\s+0\s+0\s+0\s+0\s+1\s+0`, "task", "stats", u)
	mustCLI(t, `(?m)^pay\s+0\s+0\s+1\s`, "task", "stats", u)
	mustCLI(t, `cli-r1\s+60/60\s+0-59\s+0\s+1\s+.*housekeeper`, "replicas", u)
	mustCLI(t, `orders\s+true`, "biz", "pause", "orders", u)
	if !poll(5*time.Second, func() bool {
		_, out, _ := axcli("task", "stats", u)
		return regexp.MustCompile(`(?m)^orders\s+1\s.*paused`).MatchString(out)
	}) {
		t.Error("stats never showed orders paused")
	}
	mustCLI(t, `orders\s+true\s+5\s`, "biz", "set", "orders", "--max-in-flight", "5", u)
	mustCLI(t, `orders\s+false\s+5\s`, "biz", "resume", "orders", u)
	checkCLIBulk(t, u)
	mustCLI(t, `status\s+WAITING`, "task", "reschedule", "cli-1", "--delay", "2h", u)
	mustCLI(t, `status\s+CANCELLED`, "task", "cancel", "cli-1", u)
	checkCLIErrors(t, u)
	checkCLIContext(t, url)
}

func checkCLIBulk(t *testing.T, u string) {
	mustCLI(t, `dry run: requeue would take 1 tasks(.|\n)*cli-dead`, "bulk", "requeue", "--biz", "pay", "--status", "DEAD", u)
	if code, _, errs := axcli("bulk", "requeue", u); code != 1 || !strings.Contains(errs, "filter: empty") {
		t.Errorf("bulk without a filter: exit %d, %q", code, errs)
	}
	out := mustCLI(t, `job \S+ started: requeue of 1 tasks`, "bulk", "requeue", "--biz", "pay", "--status", "DEAD", "--run", "--by", "ops", u)
	job := strings.Fields(out)[1]
	if !poll(10*time.Second, func() bool {
		_, out, _ := axcli("bulk", "status", job, u)
		return regexp.MustCompile(`state\s+done`).MatchString(out) && regexp.MustCompile(`by\s+ops`).MatchString(out)
	}) {
		t.Errorf("bulk job %s never done", job)
	}
}

func checkCLIErrors(t *testing.T, u string) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "get", u}, "one task id"},
		{[]string{"task", "explode", u}, `task "explode": unknown`},
		{[]string{"task", "get", "nope-404", u}, "404: no task nope-404"},
		{[]string{"task", "get", "cli-1", u, "--prefix", "other"}, "no bridge answers on other.api.task.get"},
		{[]string{"task", "list", "--status", "SUCCESS", u}, "400: status SUCCESS"},
		{[]string{"biz", "set", "orders", u}, "give the settings to change"},
	} {
		if code, _, errs := axcli(c.args...); code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("axbridge %s: exit %d, stderr %q; want 1 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

// checkCLIContext connects through a natscli context file, as `nats context add` writes it.
func checkCLIContext(t *testing.T, url string) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if err := os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats", "context", "axtest.json"), []byte(`{"url":"`+url+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AX_NATS_URL", "")
	mustCLI(t, `status\s+CANCELLED`, "task", "get", "cli-1", "--context", "axtest")
	if code, _, errs := axcli("task", "get", "cli-1", "--context", "missing"); code != 1 || !strings.Contains(errs, "--context missing") {
		t.Errorf("unknown context: exit %d, %q", code, errs)
	}
}
