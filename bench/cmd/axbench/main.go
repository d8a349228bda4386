// Command axbench runs the ax bridge's end-to-end bench (package bench) until `axbridge bench`
// is wired into the axbridge binary: go run ./bench/cmd/axbench --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/axbridge/axbridge/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
