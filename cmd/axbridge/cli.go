package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
)

// The operator CLI: axbridge task|bulk|replicas|biz ... talks to a running cluster over the task
// API (subjects.md), with the connection flags of the service and natscli's contexts.

// cliCommands are the first arguments that run the CLI rather than the service.
var cliCommands = map[string]bool{"task": true, "bulk": true, "replicas": true, "biz": true}

// cli is one CLI invocation: its flags, connection and output.
type cli struct {
	fs                                               *flag.FlagSet
	stdout, stderr                                   io.Writer
	natsCtx, url, creds, nkey, user, password, token string
	tlsCA, tlsCert, tlsKey, prefix                   string
	json                                             bool
	timeout                                          time.Duration
	nc                                               *nats.Conn
	o                                                cliOpts
}

func newCLI(name string, stdout, stderr io.Writer) *cli {
	c := &cli{fs: flag.NewFlagSet("axbridge "+name, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.natsCtx, "context", "", "natscli context to connect with (nats context ls); default: the selected one, if any")
	c.fs.StringVar(&c.url, "nats-url", os.Getenv("AX_NATS_URL"), "NATS server URL(s) (default: the context's, else nats://127.0.0.1:4222)")
	c.fs.StringVar(&c.creds, "creds", "", "NATS credentials file")
	c.fs.StringVar(&c.nkey, "nkey", "", "NATS NKey seed file")
	c.fs.StringVar(&c.user, "user", "", "NATS user name")
	c.fs.StringVar(&c.password, "password", os.Getenv("AX_PASSWORD"), "NATS password (prefer AX_PASSWORD)")
	c.fs.StringVar(&c.token, "token", os.Getenv("AX_TOKEN"), "NATS token (prefer AX_TOKEN)")
	c.fs.StringVar(&c.tlsCA, "tlsca", "", "TLS CA certificate file")
	c.fs.StringVar(&c.tlsCert, "tlscert", "", "TLS client certificate file")
	c.fs.StringVar(&c.tlsKey, "tlskey", "", "TLS client key file")
	c.fs.StringVar(&c.prefix, "prefix", envOr("AX_PREFIX", bridge.DefaultPrefix), "the deployment's subject prefix (--prefix of the service)")
	c.fs.BoolVar(&c.json, "json", false, "print the API's JSON answer instead of a table")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for an answer")
	c.addFlags(&c.o)
	c.fs.Usage = func() {
		fmt.Fprintln(c.fs.Output(), usage)
		c.fs.PrintDefaults()
	}
	return c
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parse reads the flags, wherever they are among the arguments, and returns the others.
func (c *cli) parse(args []string) ([]string, error) {
	var rest []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, err
		}
		if c.fs.NArg() == 0 {
			c.o.set = map[string]bool{}
			c.fs.Visit(func(f *flag.Flag) { c.o.set[f.Name] = true })
			return rest, nil
		}
		rest = append(rest, c.fs.Arg(0))
		args = c.fs.Args()[1:]
	}
}

// connect opens the connection: the context's settings, then the flags given over them.
func (c *cli) connect() error {
	var opts []nats.Option
	url := c.url
	if c.natsCtx != "" || natscontext.SelectedContext() != "" {
		nctx, err := natscontext.New(c.natsCtx, true)
		if err != nil {
			return fmt.Errorf("--context %s: %w", c.natsCtx, err)
		}
		if opts, err = nctx.NATSOptions(); err != nil {
			return fmt.Errorf("--context %s: %w", nctx.Name, err)
		}
		if url == "" {
			url = nctx.ServerURL()
		}
	}
	opts = append(opts, nats.Name("axbridge-cli"))
	if url == "" {
		url = nats.DefaultURL
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return fmt.Errorf("--nkey %s: %w", c.nkey, err)
		}
		opts = append(opts, opt)
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", redactURLs(url), err)
	}
	c.nc = nc
	return nil
}

// errAPI is an error answer of the task API.
type errAPI struct{ code, msg string }

func (e errAPI) Error() string { return e.code + ": " + e.msg }

// call requests <prefix>.api.<op> with body and decodes the answer into out (if not nil); with
// --json it prints the answer as it came.
func (c *cli) call(op string, body any, out any) error {
	var data []byte
	switch b := body.(type) {
	case nil:
	case string:
		data = []byte(b)
	default:
		data, _ = json.Marshal(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, c.prefix+".api."+op, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no bridge answers on %s.api.%s: is one running with --prefix %s, and may this user publish there?", c.prefix, op, c.prefix)
	}
	if err != nil {
		return fmt.Errorf("%s.api.%s: %w", c.prefix, op, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return errAPI{code, m.Header.Get("Nats-Service-Error")}
	}
	if c.json {
		var pretty bytes.Buffer
		if json.Indent(&pretty, m.Data, "", "  ") == nil {
			fmt.Fprintln(c.stdout, pretty.String())
			return nil
		}
	}
	if out != nil {
		return json.Unmarshal(m.Data, out)
	}
	return nil
}

// table prints rows under a header, in aligned columns.
func (c *cli) table(header []string, rows [][]string) {
	w := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
}

// cliMain runs `axbridge <command> ...` and returns the exit code.
func cliMain(args []string, stdout, stderr io.Writer) int {
	cmd := args[0]
	c := newCLI(cmd, stdout, stderr)
	rest, err := c.parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = c.dispatch(cmd, rest)
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "axbridge "+cmd+":", err)
		return 1
	}
	return 0
}

// usage is the CLI's help.
const usage = `usage:
  axbridge task get|cancel|requeue <id>
  axbridge task reschedule <id> (--delay 10m | --at 2026-12-01T08:00:00Z)
  axbridge task list [--biz B] [--status DEAD,WAITING] [--due-after T] [--due-before T] [--id-prefix P] [--limit N] [--cursor C] [--all]
  axbridge task stats
  axbridge bulk requeue|cancel|delete|reschedule <filter flags as list> [--rate R] [--delay D | --at T] [--run] [--by NAME]
  axbridge bulk status|stop <job>
  axbridge replicas
  axbridge biz list | get <biz> | pause <biz> | resume <biz>
  axbridge biz set <biz> [--max-in-flight N] [--rate R] [--burst N] [--misfire P] [--overlap P] [--alarm-p99 D]
connection: --context, --nats-url, --creds, --nkey, --user, --password, --token, --tlsca, --tlscert, --tlskey, --prefix; output: --json`

func (c *cli) dispatch(cmd string, rest []string) error {
	sub := ""
	if len(rest) > 0 {
		sub, rest = rest[0], rest[1:]
	}
	if cmd == "replicas" {
		if sub != "" {
			return fmt.Errorf("replicas takes no arguments\n%s", usage)
		}
		return c.withConn(c.replicas)
	}
	run := map[string]map[string]func([]string) error{
		"task": {"get": c.taskOp("get"), "cancel": c.taskOp("cancel"), "requeue": c.taskOp("requeue"),
			"reschedule": c.reschedule, "list": c.list, "stats": c.stats},
		"bulk": {"requeue": c.bulk("requeue"), "cancel": c.bulk("cancel"), "delete": c.bulk("delete"),
			"reschedule": c.bulk("reschedule"), "status": c.bulkJob(false), "stop": c.bulkJob(true)},
		"biz": {"list": c.bizList, "get": c.bizGet, "set": c.bizSet, "pause": c.bizPause(true), "resume": c.bizPause(false)},
	}[cmd]
	f, ok := run[sub]
	if !ok {
		return fmt.Errorf("%s %q: unknown\n%s", cmd, sub, usage)
	}
	return c.withConn(func() error { return f(rest) })
}

// withConn connects, then runs f.
func (c *cli) withConn(f func() error) error {
	if err := c.connect(); err != nil {
		return err
	}
	return f()
}
