package kvstore_test

import (
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

// sT0 is a series' first tick; sec is one second in ms.
const (
	sT0 = int64(1796112000000)
	sec = int64(1000)
)

func everySeries(every time.Duration, misfire, overlap string) kvstore.Task {
	return kvstore.Task{
		ID: "report-1s", BizType: "reports", Status: kvstore.StatusWaiting, DueAt: sT0,
		MaxRetry: 2, AckWait: 30 * time.Second, Backoff: []time.Duration{time.Second},
		CreatedAt: sT0 - sec, UpdatedAt: sT0 - sec,
		Series: &kvstore.Series{Every: every, Misfire: misfire, Catchup: time.Hour, Overlap: overlap,
			Tick: sT0, Next: sT0 + every.Milliseconds(), Run: 1},
	}
}

// occurrence claims t at now and returns the RUNNING record and its token.
func occurrence(t *testing.T, task kvstore.Task, now int64, rev uint64) (kvstore.Task, uint64) {
	t.Helper()
	task, fire := kvstore.Misfire(task, now)
	if !fire {
		t.Fatalf("Misfire at %d fired nothing: tick %d", now-sT0, task.Series.Tick-sT0)
	}
	run, err := kvstore.Claim(task, now, "a", rev)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return run, rev
}

// wantSeries checks the record's state: status, the tick (from sT0) it waits for, the run and the
// counts missed, coalesced, skipped, dead.
func wantSeries(t *testing.T, task kvstore.Task, status kvstore.Status, tick int64, run int, counts [4]int64) {
	t.Helper()
	s := task.Series
	got := [4]int64{s.Missed, s.Coalesced, s.Skipped, s.Dead}
	if task.Status != status || s.Tick-sT0 != tick || s.Run != run || got != counts {
		t.Fatalf("got %s tick %d run %d counts %v; want %s tick %d run %d counts %v",
			task.Status, s.Tick-sT0, s.Run, got, status, tick, run, counts)
	}
	if status == kvstore.StatusWaiting && (task.Attempt != 0 || task.DueAt != s.Tick) {
		t.Fatalf("waiting record: attempt %d due %d, want 0 and the tick %d", task.Attempt, task.DueAt-sT0, tick)
	}
}

func TestSeriesOccurrencesTakeTurns(t *testing.T) {
	t.Parallel()
	task := everySeries(time.Second, "fire-once", "skip")
	run, tok := occurrence(t, task, sT0, 5)
	task, _ = kvstore.Ack(run, tok, sT0+20)
	wantSeries(t, task, kvstore.StatusWaiting, sec, 2, [4]int64{})
	if task.Series.Next != sT0+2*sec {
		t.Fatalf("next tick %d, want the one after", task.Series.Next-sT0)
	}
	// A nak retries the occurrence: the same tick, its second attempt, no misfire on the retry.
	run, tok = occurrence(t, task, sT0+sec, 6)
	task, _ = kvstore.Nak(run, tok, sT0+sec+10, -1, "")
	if task.Attempt != 1 || task.Series.Tick != sT0+sec || task.DueAt != sT0+2*sec+10 {
		t.Fatalf("nak: attempt %d tick %d due %d", task.Attempt, task.Series.Tick-sT0, task.DueAt-sT0)
	}
	run, tok = occurrence(t, task, sT0+3*sec, 7) // late, with later ticks come meanwhile: a retry still fires
	if run.Attempt != 2 || run.Series.Tick != sT0+sec {
		t.Fatalf("retry: attempt %d tick %d", run.Attempt, run.Series.Tick-sT0)
	}
	// Its last attempt goes DEAD: counted, and the series goes on (the ticks that came during it are skipped).
	task, _ = kvstore.Term(run, tok, sT0+3*sec+500, "boom")
	wantSeries(t, task, kvstore.StatusWaiting, 4*sec, 3, [4]int64{0, 0, 2, 1})
	if !kvstore.Died(&task) || task.Series.DeadRun != 2 || task.Series.DeadAttempt != 2 || task.LastError != "boom" {
		t.Fatalf("dead occurrence: died %v run %d attempt %d error %q", kvstore.Died(&task),
			task.Series.DeadRun, task.Series.DeadAttempt, task.LastError)
	}
	// The next occurrence's success is not a death.
	run, tok = occurrence(t, task, sT0+4*sec, 8)
	if task, _ = kvstore.Ack(run, tok, sT0+4*sec+5); kvstore.Died(&task) {
		t.Fatal("a success after a dead occurrence counts as a death")
	}
}

func TestSeriesOverlap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		overlap string
		tick    int64
		skipped int64
	}{
		{"skip", 4 * sec, 3},       // ticks 1, 2 and 3 came while run 1 was unacked
		{"buffer-one", 3 * sec, 2}, // the latest of them fires now
	} {
		task := everySeries(time.Second, "fire-once", c.overlap)
		run, tok := occurrence(t, task, sT0, 5)
		task, _ = kvstore.Ack(run, tok, sT0+3*sec+200)
		wantSeries(t, task, kvstore.StatusWaiting, c.tick, 2, [4]int64{0, 0, c.skipped, 0})
	}
}

func TestSeriesMisfire(t *testing.T) {
	t.Parallel()
	now := sT0 + 5*sec + 300 // ticks 0..5 passed while no bridge could fire
	for _, c := range []struct {
		misfire string
		fire    bool
		tick    int64
		counts  [4]int64
		catchUp int64
	}{
		{"fire-once", true, 5 * sec, [4]int64{0, 5, 0, 0}, 0},
		{"skip", false, 6 * sec, [4]int64{6, 0, 0, 0}, 0},
		{"fire-all", true, 0, [4]int64{}, 5 * sec},
	} {
		task, fire := kvstore.Misfire(everySeries(time.Second, c.misfire, "skip"), now)
		if fire != c.fire {
			t.Fatalf("%s: fire %v", c.misfire, fire)
		}
		wantSeries(t, task, kvstore.StatusWaiting, c.tick, 1, c.counts)
		if got := task.Series.CatchUpTo; got != 0 && got-sT0 != c.catchUp || got == 0 && c.catchUp != 0 {
			t.Fatalf("%s: catch up to %d", c.misfire, got-sT0)
		}
	}
}

// fire-all fires each missed tick in order, and none of them counts as overlapping.
func TestSeriesFireAllCatchesUp(t *testing.T) {
	t.Parallel()
	task := everySeries(time.Second, "fire-all", "skip")
	now := sT0 + 3*sec + 300
	for i := range int64(4) {
		run, tok := occurrence(t, task, now, uint64(10+i))
		if run.Series.Tick != sT0+i*sec || run.Series.Run != int(i+1) {
			t.Fatalf("occurrence %d: tick %d run %d", i, run.Series.Tick-sT0, run.Series.Run)
		}
		now += 10
		task, _ = kvstore.Ack(run, tok, now)
	}
	wantSeries(t, task, kvstore.StatusWaiting, 4*sec, 5, [4]int64{})
}

func TestSeriesCatchupWindow(t *testing.T) {
	t.Parallel()
	task := everySeries(10*time.Minute, "fire-once", "skip")
	task, fire := kvstore.Misfire(task, sT0+3*3600*sec+sec) // 3 h down: 19 ticks, 6 within the hour
	if !fire {
		t.Fatal("nothing fired")
	}
	wantSeries(t, task, kvstore.StatusWaiting, 18*600*sec, 1, [4]int64{13, 5, 0, 0})
	// A single tick later than the window is missed too.
	task = everySeries(2*time.Hour, "fire-once", "skip")
	task, fire = kvstore.Misfire(task, sT0+3600*sec+1)
	if fire {
		t.Fatal("a tick past the catch-up window fired")
	}
	wantSeries(t, task, kvstore.StatusWaiting, 7200*sec, 1, [4]int64{1, 0, 0, 0})
}

// Under skip a lone late tick is missed once it is later than the grace (the interval, at most a
// minute); a tick late by less fires.
func TestSeriesSkipGrace(t *testing.T) {
	t.Parallel()
	task := everySeries(time.Hour, "skip", "skip")
	if _, fire := kvstore.Misfire(task, sT0+59*sec); !fire {
		t.Fatal("59 s late: not fired")
	}
	task, fire := kvstore.Misfire(task, sT0+61*sec)
	if fire {
		t.Fatal("61 s late: fired")
	}
	wantSeries(t, task, kvstore.StatusWaiting, 3600*sec, 1, [4]int64{1, 0, 0, 0})
}

func TestSeriesEnds(t *testing.T) {
	t.Parallel()
	task := everySeries(time.Second, "fire-once", "skip")
	task.Series.MaxRuns = 2
	run, tok := occurrence(t, task, sT0, 5)
	task, _ = kvstore.Ack(run, tok, sT0+10)
	if task.Series.Next != 0 {
		t.Fatalf("the last run names a next tick %d", task.Series.Next-sT0)
	}
	run, tok = occurrence(t, task, sT0+sec, 6)
	task, _ = kvstore.Ack(run, tok, sT0+sec+10)
	wantSeries(t, task, kvstore.StatusSuccess, sec, 2, [4]int64{})

	task = everySeries(time.Second, "fire-once", "skip")
	task.Series.Until = sT0 + sec
	task.Series.Next = sT0 + sec
	run, tok = occurrence(t, task, sT0, 5)
	task, _ = kvstore.Ack(run, tok, sT0+10)
	run, tok = occurrence(t, task, sT0+sec, 6)
	task, _ = kvstore.Term(run, tok, sT0+sec+10, "")
	wantSeries(t, task, kvstore.StatusDead, sec, 2, [4]int64{0, 0, 0, 1})
}

func TestSeriesCancel(t *testing.T) {
	t.Parallel()
	run, tok := occurrence(t, everySeries(time.Second, "fire-once", "skip"), sT0, 5)
	ending, err := kvstore.Cancel(run, sT0+5)
	if err != nil || ending.Status != kvstore.StatusRunning || !ending.Series.Ending || run.Series.Ending {
		t.Fatalf("cancel while running: %v %+v (input changed: %v)", err, ending.Series, run.Series.Ending)
	}
	task, _ := kvstore.Ack(ending, tok, sT0+10)
	if task.Status != kvstore.StatusCancelled || task.FinishedAt != sT0+10 {
		t.Fatalf("after its ack: %s", task.Status)
	}
	task, _ = kvstore.Cancel(everySeries(time.Second, "fire-once", "skip"), sT0)
	if task.Status != kvstore.StatusCancelled {
		t.Fatalf("cancel while waiting: %s", task.Status)
	}
}

func TestSeriesReschedule(t *testing.T) {
	t.Parallel()
	task, err := kvstore.Reschedule(everySeries(time.Minute, "fire-once", "skip"), sT0-sec, sT0+90*sec)
	if err != nil {
		t.Fatal(err)
	}
	if task.DueAt != sT0+90*sec || task.Series.Tick != sT0+90*sec || task.Series.Next != sT0+150*sec {
		t.Fatalf("due %d tick %d next %d", task.DueAt-sT0, task.Series.Tick-sT0, task.Series.Next-sT0)
	}
}

func TestSeriesCronInZone(t *testing.T) {
	t.Parallel()
	// 09:00 in Berlin, daily: 08:00 UTC in winter.
	first := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	task := kvstore.Task{ID: "daily", Status: kvstore.StatusWaiting, DueAt: first, AckWait: time.Second,
		Series: &kvstore.Series{Cron: "0 0 9 * * *", Zone: "Europe/Berlin", Misfire: "fire-once",
			Catchup: time.Hour, Overlap: "skip", Tick: first, Next: first + 24*3600*sec, Run: 1}}
	run, _ := kvstore.Claim(task, first, "a", 3)
	task, _ = kvstore.Ack(run, 3, first+100)
	if want := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).UnixMilli(); task.Series.Tick != want ||
		task.Series.Next != want+24*3600*sec {
		t.Fatalf("tick %s next %s", time.UnixMilli(task.Series.Tick).UTC(), time.UnixMilli(task.Series.Next).UTC())
	}
}

func TestSeriesJitter(t *testing.T) {
	t.Parallel()
	task := everySeries(time.Minute, "fire-once", "skip")
	task.Series.Jitter = 10 * time.Second
	run, tok := occurrence(t, task, sT0, 5)
	a, _ := kvstore.Ack(run, tok, sT0+10)
	b, _ := kvstore.Ack(run, tok, sT0+10)
	if off := a.DueAt - a.Series.Tick; off < 0 || off >= 10*sec || a.DueAt != b.DueAt {
		t.Fatalf("jitter %d ms (again: %d)", off, b.DueAt-b.Series.Tick)
	}
}
