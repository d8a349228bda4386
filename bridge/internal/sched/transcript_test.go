package sched

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore/record"
)

var update = flag.Bool("update", false, "rewrite the transcripts' expected outputs")

// The transcripts under testdata/ are input lines to the core, each followed by the outputs it
// must give ("> " lines). Run with -update to write what the core gives instead, then read the
// diff. The commands:
//
//	now MS                          the time, UTC Unix ms
//	ahead MS                        the claim-ahead window
//	own P...                        the partitions owned
//	put ID REV STATUS due=MS [biz=B] [partial] [owner=R claim=TOK lease=MS]
//	del ID REV
//	take [fenced] [offline]         Take, then what Ready returns
//	jobs                            every job Next hands out, each Sent
//	retry ID REV KIND at=MS [unsure]  a worker's result
//	held ID REV due=MS claim=TOK lease=MS   a claim that landed ahead
//	suspect ID REV KIND due=MS      the reconciler's question
//	stats                           the bounded state
//	maxclaims N                     the claim budget (Config.MaxClaims)
//	loading on|off                  whether a watch is loading partitions
//	claiming                        the fires taken and not yet out, and the budget now
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTranscript(t, f) })
	}
}

func runTranscript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Replica: "r1", Partitions: 1, PreRead: time.Second, MaxPreReadTasks: 100,
		MaxPreReadBytes: 1 << 20, LeaseSkew: 100 * time.Millisecond}, []int{0}, Time{})
	var out []string // the transcript as the core gives it
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := 0; i < len(lines); {
		line := lines[i]
		i++
		if strings.HasPrefix(line, "> ") {
			continue // an expected output of no input: dropped by -update
		}
		out = append(out, line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var want []string
		for ; i < len(lines) && strings.HasPrefix(lines[i], "> "); i++ {
			want = append(want, lines[i][2:])
		}
		got := step(t, c, line)
		for _, g := range got {
			out = append(out, "> "+g)
		}
		if !*update && !slices.Equal(got, want) {
			t.Errorf("%s:%d: %s\n got: %q\nwant: %q", path, i, line, got, want)
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// step runs one input line and returns the outputs.
func step(t *testing.T, c *Core, line string) []string {
	f := strings.Fields(line)
	kv := map[string]string{}
	var flags []string
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			flags = append(flags, a)
		}
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return n
	}
	has := func(s string) bool { return slices.Contains(flags, s) }
	switch f[0] {
	case "now":
		ms := num(f[1])
		c.Now(Time{Mono: time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond), Wall: ms * 1e6, Ms: ms})
	case "ahead":
		c.SetAhead(time.Duration(num(f[1])) * time.Millisecond)
	case "maxclaims":
		c.cfg.MaxClaims = int(num(f[1]))
	case "loading":
		c.SetLoading(f[1] == "on")
	case "claiming":
		n, budget := c.Claiming()
		return []string{fmt.Sprintf("claiming %d of %d", n, budget)}
	case "own":
		parts := make([]bool, 1)
		for _, p := range f[1:] {
			parts[num(p)] = true
		}
		c.Own(parts)
	case "put":
		e := record.Entry{Revision: uint64(num(f[2])), Partial: has("partial"), Task: record.Task{ID: f[1],
			Status: record.Status(f[3]), DueAt: num(kv["due"]), Owner: kv["owner"], BizType: kv["biz"],
			Claim: uint64(num(orZero(kv["claim"]))), LeaseUntil: num(orZero(kv["lease"]))}}
		if !e.Partial {
			e.Task.Payload = []byte("body")
		}
		c.Apply(record.Event{Kind: record.EventPut, ID: f[1], Revision: e.Revision, Entry: e})
	case "del":
		c.Apply(record.Event{Kind: record.EventDelete, ID: f[1], Revision: uint64(num(f[2]))})
	case "take":
		c.Take(!has("fenced"), !has("offline"))
	case "jobs":
		var out []string
		for {
			j, ok := c.Next()
			if !ok {
				return append(out, readyLines(c.Ready())...)
			}
			c.Sent(j)
			out = append(out, jobLine(j))
		}
	case "retry":
		c.Result(Result{ID: f[1], Rev: uint64(num(f[2])), Kind: kindOf(t, f[3]), At: num(kv["at"]), Retry: true, Unsure: has("unsure")})
	case "held":
		e := record.Entry{Revision: uint64(num(f[2])), Task: record.Task{ID: f[1], Status: record.StatusRunning,
			DueAt: num(kv["due"]), Owner: "r1", Claim: uint64(num(kv["claim"])), LeaseUntil: num(kv["lease"])}}
		c.Result(Result{ID: f[1], Rev: e.Revision, Kind: Publish, Held: &e})
	case "suspect":
		why := c.Suspect(Candidate{ID: f[1], Rev: uint64(num(f[2])), Kind: kindOf(t, f[3]), Due: num(kv["due"])})
		return []string{"suspect " + cmp.Or(why, "no")}
	case "stats":
		s := c.Stats()
		n, oldest := c.Overdue()
		return []string{fmt.Sprintf("indexed=%d queued=%d preread=%d held=%d tasks=%d overdue=%d oldest=%d",
			s.Indexed, s.Queued, s.PreRead, s.Held, s.Tasks, n, oldest)}
	default:
		t.Fatalf("unknown command %q", line)
	}
	return readyLines(c.Ready())
}

func orZero(s string) string { return cmp.Or(s, "0") }

func kindOf(t *testing.T, s string) Kind {
	for k := Fire; k <= Publish; k++ {
		if k.String() == s {
			return k
		}
	}
	t.Fatalf("unknown kind %q", s)
	return 0
}

func jobLine(j Job) string {
	if j.Kind == PreRead {
		return "preread " + strings.Join(j.IDs, " ")
	}
	s := fmt.Sprintf("%s %s rev=%d due=%d", j.Kind, j.ID, j.Rev, j.Due)
	if j.Unsure {
		s += " unsure"
	}
	if j.Entry != nil {
		s += " payload"
	}
	return s
}

func readyLines(r Ready) []string {
	var out []string
	for _, e := range r.Publish {
		out = append(out, fmt.Sprintf("publish %s rev=%d", e.Task.ID, e.Revision))
	}
	for _, e := range r.Fenced {
		out = append(out, fmt.Sprintf("fenced %s rev=%d", e.Task.ID, e.Revision))
	}
	for _, d := range r.Drops {
		out = append(out, fmt.Sprintf("drop %s rev=%d", d.ID, d.Rev))
	}
	for _, id := range r.Behind {
		out = append(out, "behind "+id)
	}
	return out
}
