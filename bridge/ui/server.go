// Package ui is the bridge's status page (issue 26): per-bizType counts, the lateness of the last
// 15 minutes as a chart, the DEAD tasks with requeue, the series and their next ticks, the
// replicas and their partitions. It is server-rendered (html/template, SVG drawn in Go), fetches
// nothing from elsewhere and works without JavaScript: the page refreshes itself with a meta tag.
// Everything it shows comes from the task API over NATS (subjects.md), as the CLI's does.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

//go:embed page.html
var files embed.FS

// Config is the page's.
type Config struct {
	Prefix   string // the deployment's subject prefix
	ReadOnly bool   // no requeue
	// Token, if set, is asked of every request: as a bearer token, or as the password of HTTP
	// basic auth (any user name), which is what a browser prompts for.
	Token  string
	Logger *slog.Logger
	// SampleEvery is how often the lateness chart takes a sample (default 10s).
	SampleEvery time.Duration
}

// Server serves the page. Run samples the lateness for its chart.
type Server struct {
	nc   *nats.Conn
	cfg  Config
	csrf string // asked of every form post: another site's page cannot read it
	hist history
	tmpl *template.Template
}

// New returns the page's server, asking the task API on nc.
func New(nc *nats.Conn, cfg Config) *Server {
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = sampleEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return &Server{nc: nc, cfg: cfg, csrf: hex.EncodeToString(b),
		tmpl: template.Must(template.New("page.html").ParseFS(files, "page.html"))}
}

// Run samples the lateness every Config.SampleEvery until ctx ends.
func (s *Server) Run(ctx context.Context) {
	tick := time.NewTicker(s.cfg.SampleEvery)
	defer tick.Stop()
	for {
		var st stats
		if err := s.call(ctx, "task.stats", nil, &st); err == nil {
			s.hist.add(time.Now(), &st)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Handler is the page: GET / and, unless read-only, POST /requeue.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("POST /requeue", s.requeue)
	return s.auth(mux)
}

// auth asks for the token, if there is one.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" {
			got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if _, pw, ok := r.BasicAuth(); ok {
				got = pw
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="axbridge", charset="UTF-8"`)
				http.Error(w, "this page needs the bridge's --ui-token (as the password; any user name)", http.StatusUnauthorized)
				return
			}
		}
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// view is what the template renders.
type view struct {
	Prefix         string
	At             string
	ReadOnly       bool
	CSRF           string
	Flash          string
	Errors         []string
	BizTypes       []bizRow
	Total          bizStats
	Replicas       replicas
	Dead           []task
	DeadTotal      int
	Series         []task
	Charts         []chart
	Confirm        *task // the requeue confirmation
	ConfirmPreview string
	Refresh        bool
	RangesOf       func([]int) string
	PreviewOf      func(task) string
	PartitionN     int
}

type bizRow struct {
	Name string
	*bizStats
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := view{Prefix: s.cfg.Prefix, ReadOnly: s.cfg.ReadOnly, CSRF: s.csrf, Flash: r.URL.Query().Get("done"), Refresh: true,
		At: time.Now().UTC().Format("2006-01-02 15:04:05 MST")}
	var st stats
	if err := s.call(ctx, "task.stats", nil, &st); err != nil {
		v.Errors = append(v.Errors, "stats: "+err.Error())
	}
	v.BizTypes, v.Total = rows(&st), st.Total
	var dead, series page
	if err := s.call(ctx, "task.list", map[string]any{"status": []string{"DEAD"}, "limit": 50}, &dead); err != nil {
		v.Errors = append(v.Errors, "DEAD tasks: "+err.Error())
	}
	if err := s.call(ctx, "task.list", map[string]any{"series": true, "status": []string{"WAITING", "RUNNING"}, "limit": 50}, &series); err != nil {
		v.Errors = append(v.Errors, "series: "+err.Error())
	}
	if err := s.call(ctx, "task.replicas", nil, &v.Replicas); err != nil {
		v.Errors = append(v.Errors, "replicas: "+err.Error())
	}
	v.Dead, v.DeadTotal, v.Series = dead.Tasks, dead.Total, series.Tasks
	v.Charts = s.hist.charts(time.Now())
	s.render(w, &v)
}

func rows(st *stats) []bizRow {
	var out []bizRow
	for name, b := range st.BizTypes {
		out = append(out, bizRow{name, b})
	}
	sortRows(out)
	return out
}

// requeue asks for a confirmation, then requeues the task and goes back to the page.
func (s *Server) requeue(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ReadOnly {
		http.Error(w, "the page is read-only (--ui-read-only)", http.StatusForbidden)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 ||
		r.Header.Get("Sec-Fetch-Site") != "" && r.Header.Get("Sec-Fetch-Site") != "same-origin" {
		http.Error(w, "this form did not come from this page: reload it and try again", http.StatusForbidden)
		return
	}
	id := r.PostFormValue("id")
	if r.PostFormValue("confirm") != "yes" {
		var t task
		if err := s.call(r.Context(), "task.get", id, &t); err != nil {
			http.Error(w, "task "+id+": "+err.Error(), http.StatusNotFound)
			return
		}
		s.render(w, &view{Prefix: s.cfg.Prefix, CSRF: s.csrf, Confirm: &t, ConfirmPreview: preview(t)})
		return
	}
	msg := "requeued " + id + ": it fires again from attempt 1"
	if err := s.call(r.Context(), "task.requeue", id, nil); err != nil {
		msg = "requeue " + id + " failed: " + err.Error()
	}
	s.cfg.Logger.Info("status page: requeue", "task_id", id, "result", msg)
	http.Redirect(w, r, "./?done="+url.QueryEscape(msg), http.StatusSeeOther)
}

func (s *Server) render(w http.ResponseWriter, v *view) {
	v.RangesOf, v.PreviewOf, v.PartitionN = Ranges, preview, v.Replicas.Partitions
	var buf bytes.Buffer
	if err := s.tmpl.Execute(&buf, v); err != nil {
		s.cfg.Logger.Warn("status page: render", "err", err)
		http.Error(w, "the page did not render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}
