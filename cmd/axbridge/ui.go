package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge/ui"
)

// checkUI refuses a status page that would listen beyond loopback without a token.
func checkUI(o options) error {
	if o.uiAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(o.uiAddr)
	if err != nil {
		return fmt.Errorf("--ui-addr %s: want host:port, such as 127.0.0.1:8080", o.uiAddr)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && o.uiToken == "" {
		return fmt.Errorf("--ui-addr %s listens beyond loopback: give --ui-token (AX_UI_TOKEN), which the page asks for as its password", o.uiAddr)
	}
	return nil
}

// serveUI serves the status page on --ui-addr until ctx ends; its data comes over nc.
func serveUI(ctx context.Context, o options, nc *nats.Conn, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", o.uiAddr)
	if err != nil {
		return nil, fmt.Errorf("--ui-addr %s: %w", o.uiAddr, err)
	}
	page := ui.New(nc, ui.Config{Prefix: o.prefix, ReadOnly: o.uiReadOnly, Token: o.uiToken, Logger: log})
	go page.Run(ctx)
	srv := &http.Server{Handler: page.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("status page server", "err", err)
		}
	}()
	log.Info("status page", "url", "http://"+ln.Addr().String()+"/", "read_only", o.uiReadOnly)
	return srv, nil
}
