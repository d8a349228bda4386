package kvstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

const (
	mT0  = int64(1767225600000) // due time of the sample task
	mNow = mT0 + 5              // when the transitions under test happen
)

// machineTask returns a task with the default policy in the given status, as the state machine
// would have left it after attempt attempts.
func machineTask(status kvstore.Status, attempt int) kvstore.Task {
	t := kvstore.Task{
		ID:        "t1",
		BizType:   "order.timeout",
		Payload:   []byte("payload"),
		Header:    map[string][]string{"K": {"v"}},
		Status:    status,
		DueAt:     mT0,
		Attempt:   attempt,
		MaxRetry:  kvstore.DefaultMaxRetry,
		AckWait:   kvstore.DefaultAckWait,
		Backoff:   kvstore.DefaultBackoff(),
		CreatedAt: mT0 - 60000,
		UpdatedAt: mT0 - 1000,
	}
	switch status {
	case kvstore.StatusRunning:
		t.LeaseUntil = mT0 + 30000
		t.Owner = "bridge-a"
	case kvstore.StatusSuccess, kvstore.StatusDead, kvstore.StatusCancelled:
		t.FinishedAt = mT0 - 1000
	}
	if status == kvstore.StatusDead {
		t.LastError = "boom"
	}
	return t
}

var machineStatuses = []kvstore.Status{
	kvstore.StatusWaiting, kvstore.StatusRunning, kvstore.StatusSuccess, kvstore.StatusDead, kvstore.StatusCancelled,
}

// machineOps applies each operation to the current attempt of a task, at mNow.
var machineOps = []struct {
	name  string
	from  kvstore.Status // the only status it accepts
	apply func(t kvstore.Task) (kvstore.Task, error)
}{
	{"claim", kvstore.StatusWaiting, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "bridge-b") }},
	{"ack", kvstore.StatusRunning, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, t.Attempt, mNow) }},
	{"nak", kvstore.StatusRunning, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, t.Attempt, mNow, -1, "") }},
	{"term", kvstore.StatusRunning, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, t.Attempt, mNow, "") }},
	{"in progress", kvstore.StatusRunning, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.InProgress(t, t.Attempt, mNow) }},
	{"lease expiry", kvstore.StatusRunning, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, t.LeaseUntil) }},
	{"cancel", kvstore.StatusWaiting, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Cancel(t, mNow) }},
	{"requeue", kvstore.StatusDead, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Requeue(t, mNow, mNow+1000) }},
	{"reschedule", kvstore.StatusWaiting, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Reschedule(t, mNow, mNow+1000) }},
}

// Every operation from every status: the one legal source works (and stamps UpdatedAt), every
// other refuses with ErrTransition naming the operation and the status.
func TestMachineLegalAndIllegal(t *testing.T) {
	t.Parallel()
	for _, op := range machineOps {
		for _, status := range machineStatuses {
			t.Run(op.name+" from "+string(status), func(t *testing.T) {
				t.Parallel()
				in := machineTask(status, 1)
				if status == kvstore.StatusWaiting {
					in.Attempt = 0
				}
				got, err := op.apply(in)
				if status == op.from {
					if err != nil {
						t.Fatalf("%s from %s: %v", op.name, status, err)
					}
					if got.UpdatedAt == in.UpdatedAt {
						t.Errorf("%s did not stamp UpdatedAt", op.name)
					}
					return
				}
				if !errors.Is(err, kvstore.ErrTransition) {
					t.Fatalf("%s from %s: err = %v, want ErrTransition", op.name, status, err)
				}
				if msg := err.Error(); !strings.Contains(msg, op.name) || !strings.Contains(msg, string(status)) {
					t.Errorf("error %q does not name the operation %q and the status %s", msg, op.name, status)
				}
				if !reflect.DeepEqual(got, in) {
					t.Errorf("refused %s changed the task\n got: %+v\nwant: %+v", op.name, got, in)
				}
			})
		}
	}
}

// No transition writes into the slices and maps it shares with its input.
func TestMachineDoesNotMutateInput(t *testing.T) {
	t.Parallel()
	for _, op := range machineOps {
		in := machineTask(op.from, 1)
		if op.from == kvstore.StatusWaiting {
			in.Attempt = 0
		}
		before := machineTask(op.from, 1)
		before.Attempt = in.Attempt
		if _, err := op.apply(in); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if !reflect.DeepEqual(in, before) {
			t.Errorf("%s changed its input\n got: %+v\nwant: %+v", op.name, in, before)
		}
	}
}

func TestMachineTransitions(t *testing.T) {
	t.Parallel()
	running := func(attempt int, f func(*kvstore.Task)) kvstore.Task {
		t := machineTask(kvstore.StatusRunning, attempt)
		if f != nil {
			f(&t)
		}
		return t
	}
	tests := []struct {
		name  string
		in    kvstore.Task
		apply func(kvstore.Task) (kvstore.Task, error)
		want  func(*kvstore.Task) // applied to a copy of in
	}{
		{
			name:  "claim",
			in:    machineTask(kvstore.StatusWaiting, 0),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "bridge-b") },
			want: func(t *kvstore.Task) {
				t.Status, t.Attempt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusRunning, 1, mNow+30000, "bridge-b", mNow
			},
		},
		{
			name:  "claim does not look at the due time",
			in:    func() kvstore.Task { t := machineTask(kvstore.StatusWaiting, 2); t.DueAt = mNow + 1e6; return t }(),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "b") },
			want: func(t *kvstore.Task) {
				t.Status, t.Attempt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusRunning, 3, mNow+30000, "b", mNow
			},
		},
		{
			name:  "ack",
			in:    running(2, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, 2, mNow) },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusSuccess, mNow, 0, "", mNow
			},
		},
		{
			name:  "nak after attempt 1 waits backoff[0]",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 1, mNow, -1, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+10000, "nak", 0, "", mNow
			},
		},
		{
			name:  "nak after attempt 3 waits backoff[2]",
			in:    running(3, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 3, mNow, -1, "no responders") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+60000, "no responders", 0, "", mNow
			},
		},
		{
			name:  "backoff clamps to the last entry",
			in:    running(6, func(t *kvstore.Task) { t.MaxRetry = 10 }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 6, mNow, -1, "") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+60000, "nak", 0, "", mNow
			},
		},
		{
			name:  "no backoff list retries at once",
			in:    running(1, func(t *kvstore.Task) { t.Backoff = nil }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 1, mNow, -1, "x") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow, "x", 0, "", mNow
			},
		},
		{
			name: "nak with delay overrides the backoff",
			in:   running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) {
				return kvstore.Nak(t, 1, mNow, 2500*time.Millisecond, "later")
			},
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+2500, "later", 0, "", mNow
			},
		},
		{
			name:  "nak with zero delay retries at once",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 1, mNow, 0, "now") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow, "now", 0, "", mNow
			},
		},
		{
			name:  "nak delay rounds a partial millisecond up",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 1, mNow, 1001*time.Microsecond, "r") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+2, "r", 0, "", mNow
			},
		},
		{
			name:  "attempts exhausted: nak of attempt 4 of 4 is DEAD",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 4, mNow, -1, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "nak", 0, "", mNow
			},
		},
		{
			name:  "attempts exhausted even with an explicit delay",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 4, mNow, time.Second, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "nak", 0, "", mNow
			},
		},
		{
			name:  "max retry 0: DEAD after the first failure",
			in:    running(1, func(t *kvstore.Task) { t.MaxRetry = 0 }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, 1, mNow, -1, "no responders") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "no responders", 0, "", mNow
			},
		},
		{
			name:  "term",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, 1, mNow, "bad order") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "bad order", 0, "", mNow
			},
		},
		{
			name:  "term without a reason",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, 1, mNow, "") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "terminated by consumer", 0, "", mNow
			},
		},
		{
			name:  "in progress extends the lease",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.InProgress(t, 1, mT0+20000) },
			want:  func(t *kvstore.Task) { t.LeaseUntil, t.UpdatedAt = mT0+50000, mT0+20000 },
		},
		{
			name:  "lease expired at its end",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+30000) },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mT0+40000, "ack wait expired", 0, "", mT0+30000
			},
		},
		{
			name:  "lease expired later",
			in:    running(2, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+99000) },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mT0+129000, "ack wait expired", 0, "", mT0+99000
			},
		},
		{
			name:  "lease expired on the last attempt is DEAD",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+30000) },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mT0+30000, "ack wait expired", 0, "", mT0+30000
			},
		},
		{
			name:  "cancel",
			in:    machineTask(kvstore.StatusWaiting, 0),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Cancel(t, mNow) },
			want:  func(t *kvstore.Task) { t.Status, t.FinishedAt, t.UpdatedAt = kvstore.StatusCancelled, mNow, mNow },
		},
		{
			name:  "requeue keeps the last error",
			in:    machineTask(kvstore.StatusDead, 4),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Requeue(t, mNow, mNow+500) },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.Attempt, t.FinishedAt, t.UpdatedAt = kvstore.StatusWaiting, mNow+500, 0, 0, mNow
			},
		},
		{
			name:  "reschedule",
			in:    machineTask(kvstore.StatusWaiting, 1),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Reschedule(t, mNow, mNow+7) },
			want:  func(t *kvstore.Task) { t.DueAt, t.UpdatedAt = mNow+7, mNow },
		},
		{
			name:  "reschedule into the past",
			in:    machineTask(kvstore.StatusWaiting, 0),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Reschedule(t, mNow, 1) },
			want:  func(t *kvstore.Task) { t.DueAt, t.UpdatedAt = 1, mNow },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := tt.in
			tt.want(&want)
			got, err := tt.apply(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("\n got: %+v\nwant: %+v", got, want)
			}
		})
	}
}

// Reports that name an attempt other than the current one.
func TestMachineStaleAttempt(t *testing.T) {
	t.Parallel()
	// Attempt 1's lease expired, attempt 2 has been claimed: attempt 1's late ack is stale.
	task := machineTask(kvstore.StatusWaiting, 0)
	task, _ = kvstore.Claim(task, mT0, "a")
	task, _ = kvstore.LeaseExpired(task, mT0+30000)
	task, _ = kvstore.Claim(task, mT0+40000, "b")
	if task.Attempt != 2 || task.Status != kvstore.StatusRunning {
		t.Fatalf("setup: %+v", task)
	}
	reports := map[string]func(kvstore.Task, int) (kvstore.Task, error){
		"ack":         func(t kvstore.Task, a int) (kvstore.Task, error) { return kvstore.Ack(t, a, mT0+41000) },
		"nak":         func(t kvstore.Task, a int) (kvstore.Task, error) { return kvstore.Nak(t, a, mT0+41000, -1, "") },
		"term":        func(t kvstore.Task, a int) (kvstore.Task, error) { return kvstore.Term(t, a, mT0+41000, "") },
		"in progress": func(t kvstore.Task, a int) (kvstore.Task, error) { return kvstore.InProgress(t, a, mT0+41000) },
	}
	tests := []struct {
		name    string
		task    kvstore.Task
		attempt int
		wantErr error
	}{
		{"older attempt while running", task, 1, kvstore.ErrStaleAttempt},
		{"future attempt while running", task, 3, kvstore.ErrStaleAttempt},
		{"attempt 0 while running", task, 0, kvstore.ErrStaleAttempt},
		{"older attempt while waiting", machineTask(kvstore.StatusWaiting, 2), 1, kvstore.ErrStaleAttempt},
		{"older attempt after success", machineTask(kvstore.StatusSuccess, 2), 1, kvstore.ErrStaleAttempt},
		{"older attempt when dead", machineTask(kvstore.StatusDead, 4), 3, kvstore.ErrStaleAttempt},
		{"current attempt while waiting", machineTask(kvstore.StatusWaiting, 2), 2, kvstore.ErrTransition},
		{"current attempt after success", machineTask(kvstore.StatusSuccess, 2), 2, kvstore.ErrTransition},
		{"current attempt when dead", machineTask(kvstore.StatusDead, 4), 4, kvstore.ErrTransition},
		{"current attempt when cancelled", machineTask(kvstore.StatusCancelled, 0), 0, kvstore.ErrTransition},
		{"newer attempt when cancelled", machineTask(kvstore.StatusCancelled, 0), 1, kvstore.ErrTransition},
	}
	for _, tt := range tests {
		for op, report := range reports {
			t.Run(tt.name+"/"+op, func(t *testing.T) {
				t.Parallel()
				got, err := report(tt.task, tt.attempt)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), string(tt.task.Status)) {
					t.Errorf("error %q does not name %q and %s", err, op, tt.task.Status)
				}
				if !reflect.DeepEqual(got, tt.task) {
					t.Errorf("refused report changed the record\n got: %+v\nwant: %+v", got, tt.task)
				}
			})
		}
	}
}

func TestMachineLeaseNotExpired(t *testing.T) {
	t.Parallel()
	in := machineTask(kvstore.StatusRunning, 1)
	got, err := kvstore.LeaseExpired(in, in.LeaseUntil-1)
	if !errors.Is(err, kvstore.ErrTransition) || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("err = %v, want ErrTransition about the lease", err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("refusal changed the record: %+v", got)
	}
	// After an InProgress the old lease end no longer counts.
	ext, err := kvstore.InProgress(in, 1, in.LeaseUntil-1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.LeaseExpired(ext, in.LeaseUntil); !errors.Is(err, kvstore.ErrTransition) {
		t.Errorf("lease expiry after extension: err = %v, want ErrTransition", err)
	}
	if _, err := kvstore.LeaseExpired(ext, ext.LeaseUntil); err != nil {
		t.Errorf("lease expiry at the extended end: %v", err)
	}
}

// A full life under the default policy: four attempts, every one failing, then DEAD; requeued,
// it runs again from attempt 1.
func TestMachineExhaustDefaults(t *testing.T) {
	t.Parallel()
	task := machineTask(kvstore.StatusWaiting, 0)
	now := task.DueAt
	var waits []int64
	for {
		var err error
		if task, err = kvstore.Claim(task, now, "a"); err != nil {
			t.Fatal(err)
		}
		if task, err = kvstore.Nak(task, task.Attempt, now+100, -1, ""); err != nil {
			t.Fatal(err)
		}
		if task.Status == kvstore.StatusDead {
			break
		}
		waits = append(waits, task.DueAt-(now+100))
		now = task.DueAt
	}
	if want := []int64{10000, 30000, 60000}; !reflect.DeepEqual(waits, want) || task.Attempt != 4 {
		t.Fatalf("waits %v and %d attempts, want %v and 4", waits, task.Attempt, want)
	}
	task, err := kvstore.Requeue(task, now+1000, now+2000)
	if err != nil {
		t.Fatal(err)
	}
	if task, err = kvstore.Claim(task, now+2000, "b"); err != nil || task.Attempt != 1 {
		t.Fatalf("claim after requeue: attempt %d, err %v", task.Attempt, err)
	}
}

func Example_taskLife() {
	const now = int64(1767225600000) // UTC Unix ms
	task := kvstore.Task{
		ID: "order-42", BizType: "order.timeout", Status: kvstore.StatusWaiting, DueAt: now,
		MaxRetry: kvstore.DefaultMaxRetry, AckWait: kvstore.DefaultAckWait, Backoff: kvstore.DefaultBackoff(),
	}
	show := func(step string, t kvstore.Task, err error) {
		fmt.Printf("%-14s %-8s attempt=%d due=+%dms lease=+%dms last_error=%q err=%v\n",
			step, t.Status, t.Attempt, t.DueAt-now, max(t.LeaseUntil-now, 0), t.LastError, err)
	}

	task, err := kvstore.Claim(task, now, "bridge-a")
	show("claim", task, err)
	task, err = kvstore.Nak(task, 1, now+200, -1, "nak")
	show("nak", task, err)
	task, err = kvstore.Claim(task, now+10200, "bridge-b")
	show("claim", task, err)
	_, err = kvstore.Ack(task, 1, now+10300) // a late ack from attempt 1 changes nothing
	show("late ack", task, err)
	task, err = kvstore.Ack(task, 2, now+10300)
	show("ack", task, err)
	// Output:
	// claim          RUNNING  attempt=1 due=+0ms lease=+30000ms last_error="" err=<nil>
	// nak            WAITING  attempt=1 due=+10200ms lease=+0ms last_error="nak" err=<nil>
	// claim          RUNNING  attempt=2 due=+10200ms lease=+40200ms last_error="nak" err=<nil>
	// late ack       RUNNING  attempt=2 due=+10200ms lease=+40200ms last_error="nak" err=kvstore: stale attempt: ack of task "order-42" attempt 1: the task is RUNNING at attempt 2
	// ack            SUCCESS  attempt=2 due=+10200ms lease=+0ms last_error="nak" err=<nil>
}
