// Command axbridge runs the ax bridge: a delayed-task service for NATS JetStream.
//
// With no flags it starts an embedded NATS server with JetStream (client port 127.0.0.1:4222,
// store under ./data) and the bridge on it, so the nats CLI works at once:
//
//	go run ./cmd/axbridge
//	nats pub ax.schedule.orders '{"id":42}' -H Ax-Delay:5s -H Ax-Task-Id:order-42
//	nats reply ax.fire.orders +ACK
//
// With --nats-url (or AX_NATS_URL) it uses an existing server or cluster instead. Every flag can
// also be set through an AX_* environment variable: --ack-wait is AX_ACK_WAIT. Run with -h for all.
//
// Each replica needs its own id (--replica-id, AX_REPLICA_ID), and a restarted replica should keep
// its id, so that it can settle the attempts it had in flight. Without the flag the id is the host
// name plus a random suffix, kept in --data-dir/replica-id: give replicas on one host their own
// --data-dir, and where the data dir does not survive a restart (a container without a volume),
// set AX_REPLICA_ID to a stable name such as the pod name.
//
// `axbridge bench` runs the end-to-end benchmark against NATS's own Nats-Schedule on servers it
// starts itself (bench/README.md): go run ./cmd/axbridge bench -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/axbridge/axbridge/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && cliCommands[os.Args[1]] {
		stop()
		os.Exit(cliMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		code := bench.Main(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if err := run(ctx, os.Args[1:], os.Stderr); errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "axbridge:", err)
		os.Exit(1)
	}
}
