// Command probe is the health check of the ax bridge's container images, which have no shell and
// no curl: it GETs each URL given and exits 0 when every one answers 2xx within the timeout, 1
// otherwise (printing what failed). The compose file runs it as the healthcheck of the NATS
// servers (/healthz on the monitoring port) and of the bridges (/healthz and /readyz).
//
//	probe [-timeout 2s] URL...
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "time each URL has to answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: probe [-timeout 2s] URL...")
		return 2
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	code := 0
	for _, url := range fs.Args() {
		if err := check(client, url, *timeout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", url, err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", url)
	}
	return code
}

func check(client *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
