package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The probe passes only when every URL answers 2xx, and says which one failed and why.
func TestProbe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "bridge: initial load of the bucket is not done", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{srv.URL + "/healthz"}, 0, ""},
		{[]string{srv.URL + "/healthz", srv.URL + "/readyz"}, 1, "503 Service Unavailable: bridge: initial load"},
		{[]string{"-timeout", "1s", "http://127.0.0.1:1/healthz"}, 1, "127.0.0.1:1"},
		{nil, 2, "usage"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code != tc.code || !strings.Contains(errs.String(), tc.inStderr) {
			t.Errorf("probe %q: exit %d, stderr %q; want %d with %q", tc.args, code, errs.String(), tc.code, tc.inStderr)
		}
	}
}
