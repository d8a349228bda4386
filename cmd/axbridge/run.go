package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/lmittmann/tint"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// run starts everything, waits for ctx to end, then stops gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o.logFormat, o.logLevel, stderr)
	if err != nil {
		return err
	}
	backoff, err := bridge.ParseBackoff(o.backoff)
	if err != nil {
		return fmt.Errorf("--backoff %q: %w", o.backoff, err)
	}
	if err := checkAuth(o); err != nil {
		return err
	}
	if err := checkUI(o); err != nil {
		return err
	}
	replica, err := replicaID(o.replicaID, o.dataDir, os.Hostname, log.Warn)
	if err != nil {
		return err
	}

	cfg := bridge.Config{
		Prefix: o.prefix, Stream: o.stream, Consumer: o.consumer, StreamReplicas: o.replicas, ReplicaID: replica,
		AckLog: ackLogName(o.ackLog), NoAckLog: o.ackLog == "off", AckLogMaxAge: o.ackLogMaxAge,
		MaxAttempts: o.maxRetry + 1, AckWait: o.ackWait, Backoff: backoff,
		PastTolerance: o.pastTolerance, MaxHorizon: o.maxHorizon,
		LeaseSkew: o.leaseSkew, ReconcileInterval: o.reconcileInterval, IntakeMaxDeliver: o.intakeMaxDeliver,
		PartitionLease:  o.partitionLease,
		MaxPreReadTasks: o.preReadTasks, MaxPreReadBytes: o.preReadBytes, MaxClaims: o.maxClaims,
		AlarmP99: o.alarmP99, AlarmOverdue: o.alarmOverdue, Logger: log,
	}
	if err := cfg.Validate(); err != nil { // before anything starts
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer = reg
	hc := &health{} // serves /healthz and /readyz next to /metrics once the bridge exists

	if o.metricsAddr != "" { // bound before anything starts, so a taken address stops nothing
		srv, err := serveMetrics(o.metricsAddr, reg, hc, log)
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	var ns *server.Server
	if o.natsURL == "" {
		if ns, err = startEmbedded(o, log); err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
	}
	nc, err := connect(o, ns, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	partitions := 0 // an existing bucket keeps its count; a new one gets the store's default (60)
	if o.partitionsSet {
		partitions = o.partitions
	}
	store, err := kvstore.OpenJetStore(ctx, js, kvstore.Config{Bucket: o.bucket, Partitions: partitions, Replicas: o.replicas, Retention: o.retention, MarkerTTL: o.markerTTL,
		BatchMax: o.writeBatch, Logger: log})
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", o.bucket, err)
	}
	defer store.Close()

	// Heartbeats go on a connection of their own, so that they do not queue behind the bridge's
	// own traffic (a burst of claims): a replica whose heartbeats are late stops claiming.
	mnc, err := connect(o, ns, log)
	if err != nil {
		return err
	}
	defer mnc.Close()
	mjs, err := jetstream.New(mnc)
	if err != nil {
		return err
	}
	members, err := kvstore.OpenMembers(ctx, mjs, kvstore.MembersConfig{Bucket: o.bucket + "_MEMBERS", Replicas: o.replicas})
	if err != nil {
		return fmt.Errorf("open members bucket: %w", err)
	}
	cfg.Members = members

	b, err := bridge.New(nc, store, cfg)
	if err != nil {
		return err
	}
	hc.set(b)
	if err := b.Start(ctx); err != nil {
		return err
	}
	if o.uiAddr != "" {
		srv, err := serveUI(ctx, o, nc, log)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	go func() {
		// The initial load of the index leaves garbage and idle heap of its own (about as much
		// as the index at a million tasks): collect it and return it to the kernel at once.
		select {
		case <-b.Ready():
			debug.FreeOSMemory()
		case <-ctx.Done():
		}
	}()
	log.Info("ready: schedule with `nats pub "+o.prefix+".schedule.<bizType> <payload> -H Ax-Delay:5s`, consume on "+o.prefix+".fire.<bizType>",
		"prefix", o.prefix, "bucket", o.bucket, "stream", o.stream, "consumer", o.consumer, "replica", b.ReplicaID())

	<-ctx.Done()
	log.Info("stopping", "timeout", o.stopTimeout.String())
	stopCtx, cancel := context.WithTimeout(context.Background(), o.stopTimeout)
	defer cancel()
	return b.Stop(stopCtx)
}

// startEmbedded runs a nats-server with JetStream in this process.
func startEmbedded(o options, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: bad port", o.listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT // nats-server reads 0 as its default port, 4222
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "axbridge-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS server did not start on %s (is the port in use? use --listen or --nats-url)", o.listen)
	}
	log.Info("embedded NATS server running", "url", ns.ClientURL(), "store", dir)
	return ns, nil
}

func serveMetrics(addr string, reg *prometheus.Registry, hc *health, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hc.register(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return srv, nil
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ackLogName is --ack-log as bridge.Config.AckLog takes it: empty for the default or for off.
func ackLogName(flag string) string {
	if flag == "off" {
		return ""
	}
	return flag
}
