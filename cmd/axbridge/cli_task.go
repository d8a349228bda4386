package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"sort"
	"strconv"
	"strings"

	"github.com/axbridge/axbridge/bridge"
)

// cliOpts are the flags of the CLI's commands (each takes those that concern it).
type cliOpts struct {
	biz, status, dueAfter, dueBefore, idPrefix, cursor string
	limit                                              int
	all, series                                        bool
	rate                                               float64
	delay, at, by                                      string
	run                                                bool
	maxInFlight, burst                                 int
	misfire, overlap, alarmP99                         string
	set                                                map[string]bool // flags given
}

func (c *cli) addFlags(o *cliOpts) {
	fs := c.fs
	fs.StringVar(&o.biz, "biz", "", "list, bulk: only this bizType")
	fs.StringVar(&o.status, "status", "", "list, bulk: only these statuses, comma-separated (WAITING, RUNNING, DEAD)")
	fs.StringVar(&o.dueAfter, "due-after", "", "list, bulk: only tasks due at or after this RFC 3339 time")
	fs.StringVar(&o.dueBefore, "due-before", "", "list, bulk: only tasks due before this RFC 3339 time")
	fs.StringVar(&o.idPrefix, "id-prefix", "", "list, bulk: only ids that start with this")
	fs.IntVar(&o.limit, "limit", 0, "list: tasks per page (default 100, at most 1000)")
	fs.StringVar(&o.cursor, "cursor", "", "list: the page after this cursor (the last page's next_cursor)")
	fs.BoolVar(&o.all, "all", false, "list: every page, not only the first")
	fs.BoolVar(&o.series, "series", false, "list, bulk: only recurring tasks (Ax-Every, Ax-Cron)")
	fs.Float64Var(&o.rate, "rate", 0, "bulk: tasks per second (default 100); biz set: fires per second across replicas (0: no bound)")
	fs.StringVar(&o.delay, "delay", "", "reschedule: due this long from now")
	fs.StringVar(&o.at, "at", "", "reschedule: due at this RFC 3339 time")
	fs.BoolVar(&o.run, "run", false, "bulk: run the job (without it: a dry run that changes nothing)")
	fs.StringVar(&o.by, "by", "", "bulk: who you are, for the audit event (default: your OS user name)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 0, "biz set: attempts in flight across replicas (0: no bound)")
	fs.IntVar(&o.burst, "burst", 0, "biz set: burst of the rate")
	fs.StringVar(&o.misfire, "misfire", "", "biz set: default misfire policy of its series")
	fs.StringVar(&o.overlap, "overlap", "", "biz set: default overlap policy of its series")
	fs.StringVar(&o.alarmP99, "alarm-p99", "", "biz set: lateness alarm threshold (a Go duration)")
}

// taskOp runs get, cancel or requeue of one task.
func (c *cli) taskOp(op string) func([]string) error {
	return func(args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("task %s takes one task id", op)
		}
		var t taskOut
		if err := c.call("task."+op, args[0], &t); err != nil || c.json {
			return err
		}
		c.printTask(t)
		return nil
	}
}

// taskOut is a task as the API shows it.
type taskOut = bridge.TaskView

func (c *cli) printTask(t taskOut) {
	rows := [][]string{{"id", t.ID}, {"biz_type", t.BizType}, {"status", string(t.Status)}, {"due_at", t.DueAt},
		{"attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxRetry+1)}, {"updated_at", t.UpdatedAt}}
	if t.Owner != "" {
		rows = append(rows, []string{"owner", t.Owner})
	}
	if t.LastError != "" {
		rows = append(rows, []string{"last_error", t.LastError})
	}
	if t.Series != nil {
		rows = append(rows, []string{"series", t.Series.Every + t.Series.Cron, "next tick " + t.Series.NextTick})
	}
	rows = append(rows, []string{"payload", preview(t)})
	c.table([]string{"FIELD", "VALUE"}, rows)
}

func preview(t taskOut) string {
	p := "base64:" + base64.StdEncoding.EncodeToString(t.PayloadBinary)
	if t.Payload != nil {
		p = *t.Payload
	}
	if r := []rune(p); len(r) > 60 {
		return string(r[:57]) + "..."
	}
	return p
}

func (c *cli) reschedule(args []string) error {
	if len(args) != 1 {
		return errors.New("task reschedule takes one task id, and --delay or --at")
	}
	body := map[string]string{"id": args[0], "delay": c.o.delay, "due_at": c.o.at}
	var t taskOut
	if err := c.call("task.reschedule", body, &t); err != nil || c.json {
		return err
	}
	c.printTask(t)
	return nil
}

// filter is the list filter the flags give.
func (o *cliOpts) filter() map[string]any {
	f := map[string]any{}
	for k, v := range map[string]string{"biz_type": o.biz, "due_after": o.dueAfter, "due_before": o.dueBefore, "id_prefix": o.idPrefix} {
		if v != "" {
			f[k] = v
		}
	}
	if o.status != "" {
		f["status"] = strings.Split(strings.ToUpper(o.status), ",")
	}
	if o.series {
		f["series"] = true
	}
	return f
}

type listOut = bridge.ListPage

func (c *cli) list(args []string) error {
	if len(args) != 0 {
		return errors.New("task list takes flags only")
	}
	q := c.o.filter()
	if c.o.limit != 0 {
		q["limit"] = c.o.limit
	}
	cursor := c.o.cursor
	var rows [][]string
	for {
		q["cursor"] = cursor
		var p listOut
		if err := c.call("task.list", q, &p); err != nil {
			return err
		}
		for _, t := range p.Tasks {
			rows = append(rows, []string{t.ID, t.BizType, string(t.Status), t.DueAt, strconv.Itoa(t.Attempt), preview(t)})
		}
		if cursor = p.NextCursor; cursor == "" || !c.o.all {
			if !c.json {
				c.table([]string{"ID", "BIZ_TYPE", "STATUS", "DUE_AT", "ATTEMPT", "PAYLOAD"}, rows)
				if cursor != "" {
					fmt.Fprintf(c.stdout, "%d of %d shown; next page: --cursor %s (or --all)\n", len(rows), p.Total, cursor)
				}
			}
			return nil
		}
	}
}

type (
	statsOut = bridge.Stats
	statsRow = bridge.BizStats
)

func (c *cli) stats(args []string) error {
	if len(args) != 0 {
		return errors.New("task stats takes no arguments")
	}
	var st statsOut
	if err := c.call("task.stats", nil, &st); err != nil || c.json {
		return err
	}
	names := make([]string, 0, len(st.BizTypes))
	for n := range st.BizTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	var rows [][]string
	for _, n := range append(names, "(all)") {
		s, ok := st.BizTypes[n]
		if !ok {
			s = &st.Total
		}
		p50, p99, fires := "-", "-", "-"
		if l := s.Lateness; l != nil {
			p50, p99, fires = l.P50, l.P99, strconv.FormatInt(l.Fires, 10)
		}
		paused := ""
		if s.Paused {
			paused = "paused"
		}
		rows = append(rows, []string{n, itoa(s.Waiting), itoa(s.Running), itoa(s.Dead), itoa(s.Due.Overdue), itoa(s.Due.Minute),
			itoa(s.Due.Hour), itoa(s.Due.Later), s.OverdueFor, p50, p99, fires, paused})
	}
	c.table([]string{"BIZ_TYPE", "WAITING", "RUNNING", "DEAD", "OVERDUE", "<1M", "<1H", "LATER", "OLDEST", "P50", "P99", "FIRES", ""}, rows)
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// bulk dry-runs or runs a bulk job of action.
func (c *cli) bulk(action string) func([]string) error {
	return func(args []string) error {
		if len(args) != 0 {
			return fmt.Errorf("bulk %s takes flags only: the filter as task list takes it", action)
		}
		by := c.o.by
		if u, err := user.Current(); by == "" && err == nil {
			by = u.Username
		}
		q := map[string]any{"action": action, "filter": c.o.filter(), "dry_run": !c.o.run, "by": by}
		for k, v := range map[string]string{"delay": c.o.delay, "due_at": c.o.at} {
			if v != "" {
				q[k] = v
			}
		}
		if c.o.rate != 0 {
			q["rate"] = c.o.rate
		}
		var raw json.RawMessage
		if err := c.call("task.bulk", q, &raw); err != nil || c.json {
			return err
		}
		if !c.o.run {
			var out bridge.BulkDryRun
			if err := json.Unmarshal(raw, &out); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "dry run: %s would take %d tasks; these first:\n", action, out.Count)
			var rows [][]string
			for _, t := range out.Sample {
				rows = append(rows, []string{t.ID, t.BizType, string(t.Status), t.DueAt})
			}
			c.table([]string{"ID", "BIZ_TYPE", "STATUS", "DUE_AT"}, rows)
			fmt.Fprintln(c.stdout, "run it with --run")
			return nil
		}
		var out bridge.BulkJob
		if err := json.Unmarshal(raw, &out); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "job %s started: %s of %d tasks; progress: axbridge bulk status %s\n", out.Job, action, out.Matched, out.Job)
		return nil
	}
}

// bulkJob shows a job's progress, or stops it.
func (c *cli) bulkJob(stop bool) func([]string) error {
	return func(args []string) error {
		if len(args) != 1 {
			return errors.New("bulk status and stop take one job id")
		}
		var j map[string]any
		if err := c.call("task.bulk", map[string]any{"job": args[0], "stop": stop}, &j); err != nil || c.json {
			return err
		}
		var rows [][]string
		for _, k := range []string{"job", "action", "state", "replica", "by", "matched", "done", "skipped", "failed", "started_at", "updated_at", "finished_at", "last_error"} {
			if v, ok := j[k]; ok && v != "" {
				rows = append(rows, []string{k, fmt.Sprint(v)})
			}
		}
		c.table([]string{"FIELD", "VALUE"}, rows)
		return nil
	}
}
