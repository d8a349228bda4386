package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/bridge/ui"
	"github.com/axbridge/axbridge/internal/natstest"
	"github.com/axbridge/axbridge/kvstore"
)

// browser finds Chromium: $AX_CHROME, else chromium or google-chrome on the PATH.
func browser(t *testing.T) string {
	if p := os.Getenv("AX_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium to drive: install it (Debian: apt-get install chromium) or set AX_CHROME to a Chrome binary, then go test -run TestStatusPageInBrowser ./bridge/ui/; .ci/run installs it"
	if os.Getenv("AX_REQUIRE_BROWSER") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// rig is a bridge on a real nats-server with the status page in front of it.
type rig struct {
	t   *testing.T
	nc  *nats.Conn
	url string // the page's
}

func newRig(t *testing.T, cfg ui.Config) *rig {
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	store, err := kvstore.OpenJetStore(t.Context(), js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(natstest.Connect(t, srv.ClientURL()), store, bridge.Config{ReplicaID: "ui-r1", AlarmWindow: 12 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	<-b.Ready()
	cfg.Prefix = bridge.DefaultPrefix
	page := ui.New(natstest.Connect(t, srv.ClientURL()), cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go page.Run(ctx)
	hs := httptest.NewServer(page.Handler())
	t.Cleanup(func() { hs.Close(); cancel() })
	return &rig{t: t, nc: nc, url: hs.URL + "/"}
}

func (r *rig) schedule(biz, id string, kv ...string) {
	m := nats.NewMsg("ax.schedule." + biz)
	m.Header.Set(bridge.HeaderTaskID, id)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	m.Data = []byte(`{"order":"` + id + `"}`)
	js, _ := r.nc.JetStream()
	if _, err := js.PublishMsg(m); err != nil {
		r.t.Fatal(err)
	}
}

// api requests ax.api.<op> and decodes the answer.
func (r *rig) api(op string, body string, out any) {
	r.t.Helper()
	m, err := r.nc.Request("ax.api."+op, []byte(body), 5*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		r.t.Fatalf("%s %s: %v %s", op, body, err, m.Header.Get("Nats-Service-Error"))
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) waitStatus(id, want string) {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var task struct{ Status string }
		m, err := r.nc.Request("ax.api.task.get", []byte(id), 5*time.Second)
		if err == nil && json.Unmarshal(m.Data, &task) == nil && task.Status == want {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: status %s, want %s", id, task.Status, want)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// The status page in headless Chromium, on a bridge with real tasks: it loads with no console
// error, its counts are the API's, and requeue (with its confirmation) moves a DEAD task back
// to WAITING. The screenshot is a test artifact (go test -artifacts keeps it).
func TestStatusPageInBrowser(t *testing.T) {
	exe := browser(t)
	r := newRig(t, ui.Config{SampleEvery: 200 * time.Millisecond})
	sub, _ := r.nc.Subscribe("ax.fire.>", func(m *nats.Msg) { _ = m.Term() })
	defer func() { _ = sub.Unsubscribe() }()
	for i := range 3 {
		r.schedule("orders", fmt.Sprintf("order-%d", i), bridge.HeaderDelay, fmt.Sprintf("%dm", 20+i))
	}
	r.schedule("reports", "report-daily", bridge.HeaderCron, "0 0 6 * * *", bridge.HeaderTimeZone, "Europe/Berlin")
	for i := range 2 {
		r.schedule("pay", fmt.Sprintf("pay-%d", i), bridge.HeaderMaxRetry, "0")
	}
	r.waitStatus("pay-0", "DEAD")
	r.waitStatus("pay-1", "DEAD")
	r.waitStatus("order-2", "WAITING")
	r.waitStatus("report-daily", "WAITING")
	r.api("biz.set", `{"biz_type":"pay","paused":true}`, nil) // a requeued pay task then stays WAITING

	ctx := chromeCtx(t, exe)
	console := consoleOf(t, ctx)
	var st struct {
		BizTypes map[string]struct{ Waiting, Dead int } `json:"biz_types"`
	}
	r.api("task.stats", "", &st)
	// The page refreshes itself every 10 s; the chart of pay appears once a sample has its fires.
	if err := chromedp.Do(ctx, chromedp.Navigate(r.url), chromedp.WaitVisible(chromedp.CSS(`svg[aria-label="lateness of pay"]`))); err != nil {
		t.Fatal(err)
	}
	text := func(css string) string {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
		if err != nil {
			t.Fatalf("%s: %v", css, err)
		}
		return v
	}
	cell := func(biz, k string) string { return fmt.Sprintf(`tr[data-biz=%q] td[data-k=%q]`, biz, k) }
	waiting, dead, series, replicas := text(cell("orders", "waiting")), text(cell("pay", "dead")), text("#series"), text("#replicas")
	if waiting != fmt.Sprint(st.BizTypes["orders"].Waiting) || waiting != "3" || dead != fmt.Sprint(st.BizTypes["pay"].Dead) || dead != "2" {
		t.Errorf("page: orders waiting %q, pay dead %q; API: %+v", waiting, dead, st.BizTypes)
	}
	if !strings.Contains(series, "report-daily") || !strings.Contains(series, "0 0 6 * * *") || !strings.Contains(replicas, "ui-r1") {
		t.Errorf("page: series %q, replicas %q", series, replicas)
	}
	shot := screenshot(t, ctx)
	requeueFromPage(t, ctx, text, "pay-0")
	r.waitStatus("pay-0", "WAITING")
	r.waitStatus("pay-1", "DEAD")
	if errs := console(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	t.Logf("screenshot: %s", shot)
}

// consoleOf collects the page's console errors and warnings (uncaught exceptions and the
// browser's log among them); the returned func says which came so far.
func consoleOf(t *testing.T, ctx context.Context) func() []string {
	var mu sync.Mutex
	var errs []string
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// requeueFromPage clicks Requeue on task id, then Confirm, and checks the message that follows.
func requeueFromPage(t *testing.T, ctx context.Context, text func(string) string, id string) {
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`button.requeue[data-id=%q]`, id)))); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := chromedp.Do(cctx, chromedp.WaitVisible(chromedp.CSS("#confirm-requeue")))
	cancel()
	if err != nil {
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("no confirmation: %v; page: %s", err, html)
	}
	confirm := text("h1")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-requeue")), chromedp.WaitVisible(chromedp.CSS("#flash"))); err != nil {
		t.Fatal(err)
	}
	flash := text("#flash")
	if !strings.Contains(confirm, id) || !strings.Contains(flash, "requeued "+id) {
		t.Errorf("confirmation %q, then %q", confirm, flash)
	}
}

func chromeCtx(t *testing.T, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1100))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	return ctx
}

// screenshot writes the page as a PNG in the test's artifact directory and returns its path.
func screenshot(t *testing.T, ctx context.Context) string {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.ArtifactDir(), "status-page.png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// Without the token the page refuses; with it (basic auth, as a browser sends it) it serves;
// read-only refuses requeue; a form from elsewhere (no CSRF field) is refused.
func TestStatusPageAuth(t *testing.T) {
	r := newRig(t, ui.Config{Token: "s3cret", ReadOnly: true})
	get := func(user, pw string) int {
		req, _ := http.NewRequest(http.MethodGet, r.url, nil)
		if pw != "" {
			req.SetBasicAuth(user, pw)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", c)
	}
	if c := get("ops", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", c)
	}
	if c := get("ops", "s3cret"); c != http.StatusOK {
		t.Errorf("token: %d, want 200", c)
	}
	req, _ := http.NewRequest(http.MethodPost, r.url+"requeue", strings.NewReader("id=x&confirm=yes"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("ops", "s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("requeue on a read-only page: %d, want 403", res.StatusCode)
	}
}
