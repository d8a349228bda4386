package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// options are the bench's flags.
type options struct {
	sync       string // "always" or "default"
	cluster    bool
	bridges    int  // bridges in this process on the bridge side
	writeBatch int  // the bridge store's BatchMax (kvstore.Config)
	noAckLog   bool // the bridge runs without its ack log
	maxClaims  int  // the bridge's claim budget (0: its default)
	intake     int
	spread     int
	burst      int
	pending    int
	// seriesTicks: ticks of the 1s series in the series rows; limitTasks: tasks in the limits rows.
	seriesTicks int
	limitTasks  int
	bulkTasks   int     // DEAD tasks requeued in the bulk rows
	bulkRate    float64 // their bulk job's rate
	payload     int     // bytes of every task's body
	lead        time.Duration
	only        []string // scenarios to run, in table order
	json        bool
	natsServer  string
	logLevel    slog.Level
	cpuProfile  string   // file for a CPU profile of the bench process during the pending row's restart
	burstProf   string   // file for a CPU profile of the bench process from the burst's due instant to its last ack
	binaryEnv   []string // NAME=value pairs added to the environment of the binary row's axbridge
	axbridge    string   // the binary row's axbridge binary; empty: this executable
	// binarySettle is how long the binary row waits, once the index holds every pending task,
	// before it reads the resident set (the runtime and the bridge return memory after a while).
	binarySettle time.Duration
}

// scenarios in run and table order; --only also takes the aliases in scenarioAlias.
var scenarios = []string{"intake", "spread", "burst", "isolation", "series", "limits", "bulk", "pending", "binary"}

var scenarioAlias = map[string]string{
	"writes": "burst", "drain": "burst", "lateness": "spread",
	"heap": "pending", "memory": "pending", "restart": "pending", "rss": "binary",
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only, logLevel string
	fs.StringVar(&o.sync, "sync", "always", "nats-server sync_interval: always (fsync every write) or default")
	fs.BoolVar(&o.cluster, "cluster", false, "a 3-node loopback cluster with R3 streams and bucket instead of one node")
	fs.IntVar(&o.bridges, "bridges", 1, "bridge replicas on the bridge side, each on its own connection (claim conflicts are counted)")
	o.writeBatch = kvstore.DefaultBatchMax
	fs.Var((*kvstore.BatchMaxFlag)(&o.writeBatch), "write-batch", "the most bridge store writes in one atomic batch, 1-1000 (as axbridge --write-batch; default 1000); 1 sends each on its own")
	ackLog := fs.Bool("ack-log", true, "the bridge keeps consumer replies in its ack log (as axbridge --ack-log; false is --ack-log off)")
	fs.IntVar(&o.maxClaims, "max-claims", 0, "the bridge's claim budget (as axbridge --max-claims; 0 is its default)")
	fs.IntVar(&o.intake, "intake", 0, "schedules published in the intake row (default: --burst)")
	fs.IntVar(&o.spread, "spread", 2000, "tasks spread over 0.5–4 s in the lateness rows")
	fs.IntVar(&o.burst, "burst", 50000, "tasks due at one instant in the burst and writes rows")
	fs.IntVar(&o.seriesTicks, "series-ticks", 60, "ticks of the every-second series in the series rows")
	fs.IntVar(&o.limitTasks, "limit-tasks", 5000, "tasks due at once in the limits rows (max_in_flight 100)")
	fs.IntVar(&o.bulkTasks, "bulk-tasks", 10000, "DEAD tasks requeued by one bulk job in the bulk rows")
	fs.Float64Var(&o.bulkRate, "bulk-rate", 2000, "that job's rate, tasks per second")
	fs.IntVar(&o.pending, "pending", 1000000, "far-future tasks pending in the memory and restart rows")
	fs.IntVar(&o.payload, "payload-bytes", len(basePayload), "bytes of every task's body, both sides (a small JSON object, padded)")
	fs.DurationVar(&o.lead, "lead", 0, "time from the start of publishing a burst to its due instant (default: from the intake row's rate)")
	fs.StringVar(&only, "only", "", "comma-separated scenarios to run: intake, spread (lateness), burst (drain, writes), isolation, series, limits, bulk, pending (heap, memory, restart), binary (rss); default all")
	fs.StringVar(&o.axbridge, "axbridge", "", "the axbridge binary the binary row runs (default: this one)")
	fs.DurationVar(&o.binarySettle, "binary-settle", 15*time.Second, "how long the binary row waits after its index is loaded before it reads the resident set")
	binaryEnv := fs.String("binary-env", "", "comma-separated NAME=value pairs for the environment of the binary row's axbridge process, such as GOGC=50")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON instead of a table")
	fs.StringVar(&o.natsServer, "nats-server", "", "nats-server binary to run (default: build the module's nats-server into a temp dir)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (the bridge runs in it) from the pending row's restart until its index is loaded")
	fs.StringVar(&o.burstProf, "burst-cpuprofile", "", "write a CPU profile of the bench process from the bridge burst's due instant until its last ack, and one of each nats-server for 8 s from that instant into FILE.n0, FILE.n1, ...")
	fs.StringVar(&logLevel, "log-level", "error", "level of the bridge's own logs on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.sync != "always" && o.sync != "default" {
		errs = append(errs, fmt.Errorf("--sync %q: want always or default", o.sync))
	}
	o.intake = cmpOr(o.intake, o.burst)
	for name, v := range map[string]int{"--bridges": o.bridges, "--intake": o.intake, "--spread": o.spread, "--burst": o.burst, "--pending": o.pending, "--payload-bytes": o.payload, "--series-ticks": o.seriesTicks, "--limit-tasks": o.limitTasks, "--bulk-tasks": o.bulkTasks} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: want at least 1", name, v))
		}
	}
	var err error
	if o.binaryEnv, err = parseEnv(*binaryEnv); err != nil {
		errs = append(errs, err)
	}
	if o.lead < 0 {
		errs = append(errs, fmt.Errorf("--lead %v: want a positive duration", o.lead))
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel))
	}
	picked := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if a, ok := scenarioAlias[s]; ok {
			s = a
		}
		if !slices.Contains(scenarios, s) {
			errs = append(errs, fmt.Errorf("--only %q: want some of intake, spread, burst, writes, isolation, series, limits, bulk, pending, heap, restart, binary, rss", s))
			continue
		}
		picked[s] = true
	}
	for _, s := range scenarios {
		if len(picked) == 0 || picked[s] {
			o.only = append(o.only, s)
		}
	}
	o.noAckLog = !*ackLog
	return o, errors.Join(errs...)
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Main runs `axbridge bench` with args (without the subcommand name) and returns the exit
// status: 0 when every scenario ran with 0 lost and 0 early, 1 otherwise, 2 for bad flags.
// It stops early, tearing every server down, when ctx ends (e.g. on Ctrl-C).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "axbridge bench: %v\n", err)
		return 2
	}
	rep, err := run(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "axbridge bench: %v\n", err)
		return 1
	}
	if o.json {
		if err := rep.writeJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "axbridge bench: %v\n", err)
			return 1
		}
	} else {
		rep.writeTable(stdout)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// run runs the chosen scenarios, native side then bridge side each, on fresh servers.
func run(ctx context.Context, o options, stderr io.Writer) (Report, error) {
	tmp, err := os.MkdirTemp("", "axbench-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(tmp)
	p := newProgress(stderr)
	bin := o.natsServer
	if bin == "" {
		p.say("building nats-server")
		if bin, err = buildServer(ctx, tmp); err != nil {
			return Report{}, err
		}
	}
	nodes := 1
	if o.cluster {
		nodes = 3
	}
	r := &runner{o: o, p: p, bin: bin, tmp: tmp, nodes: nodes, payload: taskPayload(o.payload),
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))}
	res := map[string]map[string]*result{}
	for _, sc := range o.only {
		res[sc] = map[string]*result{}
		for _, side := range []string{"native", "bridge"} {
			if ctx.Err() != nil {
				return Report{}, context.Cause(ctx)
			}
			p.setSide(sc + "/" + side)
			p.say("start")
			x := r.scenario(ctx, sc, side)
			if x.err != nil {
				p.say("failed: %v", x.err)
			} else {
				p.say("done: lost %d, early %d", x.lost, x.early)
			}
			res[sc][side] = x
		}
	}
	if ctx.Err() != nil {
		return Report{}, context.Cause(ctx)
	}
	settings := map[string]any{
		"sync": o.sync, "nodes": nodes, "bridges": o.bridges, "write_batch": (*kvstore.BatchMaxFlag)(&o.writeBatch).String(), "burst": o.burst, "spread": o.spread, "intake": o.intake,
		"pending": o.pending, "payload_bytes": len(r.payload), "nats_server": serverVersion(bin), "go": runtime.Version(),
		"cpus": runtime.NumCPU(), "date": time.Now().UTC().Format(time.RFC3339),
	}
	return buildReport(settings, o.only, res), nil
}
