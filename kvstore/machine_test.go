package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axbridge/axbridge/kvstore"
)

const (
	mT0  = int64(1767225600000) // due time of the sample task
	mNow = mT0 + 5              // when the transitions under test happen
	// mClaim is the claim token of the sample RUNNING task: the revision of the WAITING record
	// that was claimed.
	mClaim = uint64(41)
	// mRev is the revision of the sample WAITING record, the token a claim of it takes.
	mRev = uint64(57)
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
		t.Claim = mClaim
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
	name   string
	from   kvstore.Status // the only status it accepts
	report bool           // a consumer's report on a claim: refused as stale, not as illegal
	apply  func(t kvstore.Task) (kvstore.Task, error)
}{
	{"claim", kvstore.StatusWaiting, false, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "bridge-b", mRev) }},
	{"ack", kvstore.StatusRunning, true, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, mClaim, mNow) }},
	{"nak", kvstore.StatusRunning, true, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "") }},
	{"term", kvstore.StatusRunning, true, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, mClaim, mNow, "") }},
	{"in progress", kvstore.StatusRunning, true, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.InProgress(t, mClaim, mNow) }},
	{"lease expiry", kvstore.StatusRunning, false, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, t.LeaseUntil) }},
	{"unclaim", kvstore.StatusRunning, true, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Unclaim(t, mClaim, mNow) }},
	{"cancel", kvstore.StatusWaiting, false, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Cancel(t, mNow) }},
	{"requeue", kvstore.StatusDead, false, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Requeue(t, mNow, mNow+1000) }},
	{"reschedule", kvstore.StatusWaiting, false, func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Reschedule(t, mNow, mNow+1000) }},
}

// Every operation from every status: the one legal source works (and stamps UpdatedAt), every
// other refuses with ErrTransition naming the operation and the status; a consumer's report on a
// task that does not run refuses with ErrStaleAttempt (its claim has ended, whatever it was).
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
				want := kvstore.ErrTransition
				if op.report {
					want = kvstore.ErrStaleAttempt
				}
				if !errors.Is(err, want) {
					t.Fatalf("%s from %s: err = %v, want %v", op.name, status, err, want)
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
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "bridge-b", mRev) },
			want: func(t *kvstore.Task) {
				t.Status, t.Attempt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusRunning, 1, mNow+30000, "bridge-b", mNow
				t.Claim = mRev
			},
		},
		{
			// A claim ahead of the due time is not refused; its lease counts from the due time.
			name:  "claim ahead of the due time",
			in:    func() kvstore.Task { t := machineTask(kvstore.StatusWaiting, 2); t.DueAt = mNow + 1e6; return t }(),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Claim(t, mNow, "b", mRev) },
			want: func(t *kvstore.Task) {
				t.Status, t.Attempt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusRunning, 3, mNow+1e6+30000, "b", mNow
				t.Claim = mRev
			},
		},
		{
			name:  "ack",
			in:    running(2, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, mClaim, mNow) },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusSuccess, mNow, 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "nak after attempt 1 waits backoff[0]",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+10000, "nak", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "nak after attempt 3 waits backoff[2]",
			in:    running(3, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "no responders") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+60000, "no responders", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "backoff clamps to the last entry",
			in:    running(6, func(t *kvstore.Task) { t.MaxRetry = 10 }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+60000, "nak", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "no backoff list retries at once",
			in:    running(1, func(t *kvstore.Task) { t.Backoff = nil }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "x") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow, "x", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name: "nak with delay overrides the backoff",
			in:   running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) {
				return kvstore.Nak(t, mClaim, mNow, 2500*time.Millisecond, "later")
			},
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+2500, "later", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "nak with the largest delay waits MaxRetryDelay",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, math.MaxInt64, "park") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+30*86400000, "park", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "a backoff entry beyond MaxRetryDelay is clamped",
			in:    running(1, func(t *kvstore.Task) { t.Backoff = []time.Duration{time.Duration(math.MaxInt64)} }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+30*86400000, "nak", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "nak with zero delay retries at once",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, 0, "now") },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow, "now", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name: "nak delay rounds a partial millisecond up",
			in:   running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) {
				return kvstore.Nak(t, mClaim, mNow, 1001*time.Microsecond, "r")
			},
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mNow+2, "r", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "attempts exhausted: nak of attempt 4 of 4 is DEAD",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "nak", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "attempts exhausted even with an explicit delay",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, time.Second, "nak") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "nak", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "max retry 0: DEAD after the first failure",
			in:    running(1, func(t *kvstore.Task) { t.MaxRetry = 0 }),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "no responders") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "no responders", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "term",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, mClaim, mNow, "bad order") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "bad order", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "term without a reason",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, mClaim, mNow, "") },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mNow, "terminated by consumer", 0, "", mNow
				t.Claim = 0
			},
		},
		{
			name:  "in progress extends the lease",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.InProgress(t, mClaim, mT0+20000) },
			want:  func(t *kvstore.Task) { t.LeaseUntil, t.UpdatedAt = mT0+50000, mT0+20000 },
		},
		{
			name:  "in progress never shortens the lease",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.InProgress(t, mClaim, mT0-3600000) },
			want:  func(t *kvstore.Task) { t.UpdatedAt = mT0 - 3600000 },
		},
		{
			name:  "lease expired at its end",
			in:    running(1, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+30000) },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mT0+40000, "ack wait expired", 0, "", mT0+30000
				t.Claim = 0
			},
		},
		{
			name:  "lease expired later",
			in:    running(2, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+99000) },
			want: func(t *kvstore.Task) {
				t.Status, t.DueAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusWaiting, mT0+129000, "ack wait expired", 0, "", mT0+99000
				t.Claim = 0
			},
		},
		{
			name:  "lease expired on the last attempt is DEAD",
			in:    running(4, nil),
			apply: func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, mT0+30000) },
			want: func(t *kvstore.Task) {
				t.Status, t.FinishedAt, t.LastError, t.LeaseUntil, t.Owner, t.UpdatedAt = kvstore.StatusDead, mT0+30000, "ack wait expired", 0, "", mT0+30000
				t.Claim = 0
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

// Reports that name a claim other than the current one are stale and change nothing.
func TestMachineStaleClaim(t *testing.T) {
	t.Parallel()
	// Attempt 1 (claim of revision 10) lost its lease, attempt 2 (claim of revision 12) runs.
	task := machineTask(kvstore.StatusWaiting, 0)
	task, _ = kvstore.Claim(task, mT0, "a", 10)
	task, _ = kvstore.LeaseExpired(task, mT0+30000)
	task, _ = kvstore.Claim(task, mT0+40000, "b", 12)
	if task.Attempt != 2 || task.Status != kvstore.StatusRunning || task.Claim != 12 {
		t.Fatalf("setup: %+v", task)
	}
	reports := map[string]func(kvstore.Task, uint64) (kvstore.Task, error){
		"ack":         func(t kvstore.Task, c uint64) (kvstore.Task, error) { return kvstore.Ack(t, c, mT0+41000) },
		"nak":         func(t kvstore.Task, c uint64) (kvstore.Task, error) { return kvstore.Nak(t, c, mT0+41000, -1, "") },
		"term":        func(t kvstore.Task, c uint64) (kvstore.Task, error) { return kvstore.Term(t, c, mT0+41000, "") },
		"in progress": func(t kvstore.Task, c uint64) (kvstore.Task, error) { return kvstore.InProgress(t, c, mT0+41000) },
	}
	tests := []struct {
		name  string
		task  kvstore.Task
		claim uint64
	}{
		{"earlier claim while running", task, 10},
		{"later claim while running", task, 13},
		{"token 0 while running", task, 0},
		{"token 0 on a record without a claim", func() kvstore.Task { t := task; t.Claim = 0; return t }(), 0},
		{"any claim while waiting", machineTask(kvstore.StatusWaiting, 2), mClaim},
		{"the last claim after success", machineTask(kvstore.StatusSuccess, 2), mClaim},
		{"the last claim when dead", machineTask(kvstore.StatusDead, 4), mClaim},
		{"any claim when cancelled", machineTask(kvstore.StatusCancelled, 0), 1},
	}
	for _, tt := range tests {
		for op, report := range reports {
			t.Run(tt.name+"/"+op, func(t *testing.T) {
				t.Parallel()
				got, err := report(tt.task, tt.claim)
				if !errors.Is(err, kvstore.ErrStaleAttempt) {
					t.Fatalf("err = %v, want ErrStaleAttempt", err)
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

// Every transition out of RUNNING clears the claim token; InProgress keeps it.
func TestMachineClaimCleared(t *testing.T) {
	t.Parallel()
	running := machineTask(kvstore.StatusRunning, 1)
	for name, apply := range map[string]func(kvstore.Task) (kvstore.Task, error){
		"ack": func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, mClaim, mNow) },
		"nak": func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, mClaim, mNow, -1, "") },
		"nak to DEAD": func(t kvstore.Task) (kvstore.Task, error) {
			t.MaxRetry = 0
			return kvstore.Nak(t, mClaim, mNow, -1, "")
		},
		"term":         func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, mClaim, mNow, "") },
		"lease expiry": func(t kvstore.Task) (kvstore.Task, error) { return kvstore.LeaseExpired(t, t.LeaseUntil) },
	} {
		got, err := apply(running)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Status == kvstore.StatusRunning || got.Claim != 0 || got.Owner != "" || got.LeaseUntil != 0 {
			t.Errorf("%s left %s with claim %d, owner %q, lease %d", name, got.Status, got.Claim, got.Owner, got.LeaseUntil)
		}
	}
	got, err := kvstore.InProgress(running, mClaim, mNow)
	if err != nil || got.Claim != mClaim {
		t.Errorf("in progress: claim %d, err %v; want the claim kept", got.Claim, err)
	}
	if _, err := kvstore.Claim(machineTask(kvstore.StatusWaiting, 0), mNow, "a", 0); !errors.Is(err, kvstore.ErrTransition) {
		t.Errorf("claim with revision 0: err = %v, want ErrTransition", err)
	}
}

// A zombie write after a takeover: replica a claims, pauses past its lease; replica b expires the
// lease and claims again. When a wakes, its write on the revision it knew loses the CAS, and its
// report read afresh is stale: the second attempt stays b's.
func TestMachineZombieAfterTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := kvstore.NewMemStore(4)
	first := machineTask(kvstore.StatusWaiting, 0)
	w, err := store.Create(ctx, &first)
	if err != nil {
		t.Fatal(err)
	}
	// a claims the WAITING record.
	aClaim, _ := kvstore.Claim(w.Task, mT0, "a", w.Revision)
	aRev, err := store.Update(ctx, &aClaim, w.Revision)
	if err != nil {
		t.Fatal(err)
	}
	// a pauses; b sees the lease run out and claims the retry.
	exp, _ := kvstore.LeaseExpired(aClaim, aClaim.LeaseUntil)
	expRev, err := store.Update(ctx, &exp, aRev)
	if err != nil {
		t.Fatal(err)
	}
	exp.DueAt = aClaim.LeaseUntil // b fires it at once
	bClaim, _ := kvstore.Claim(exp, aClaim.LeaseUntil, "b", expRev)
	bRev, err := store.Update(ctx, &bClaim, expRev)
	if err != nil {
		t.Fatal(err)
	}
	// a wakes and acks its attempt from the record it holds: the CAS on aRev loses.
	zombie, err := kvstore.Ack(aClaim, aClaim.Claim, aClaim.LeaseUntil+5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(ctx, &zombie, aRev); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("zombie write on revision %d: err = %v, want ErrConflict", aRev, err)
	}
	// a re-reads and retries: its claim token is not the current one.
	cur, err := store.Get(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.Ack(cur.Task, aClaim.Claim, aClaim.LeaseUntil+6); !errors.Is(err, kvstore.ErrStaleAttempt) {
		t.Fatalf("zombie ack after re-read: err = %v, want ErrStaleAttempt", err)
	}
	if cur.Revision != bRev || cur.Task.Status != kvstore.StatusRunning || cur.Task.Owner != "b" || cur.Task.Claim != expRev {
		t.Fatalf("record after the zombie: %+v at %d, want b's RUNNING claim %d at %d", cur.Task, cur.Revision, expRev, bRev)
	}
	if aClaim.Claim == bClaim.Claim {
		t.Fatalf("both claims carry token %d", aClaim.Claim)
	}
}

// A requeue with a late ack of the first life: the first life's attempt 1 and the second life's
// attempt 1 share the attempt number, not the claim token, so the late ack is ignored.
func TestMachineRequeueLateAck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := kvstore.NewMemStore(4)
	task := machineTask(kvstore.StatusWaiting, 0)
	task.MaxRetry = 0
	e, err := store.Create(ctx, &task)
	if err != nil {
		t.Fatal(err)
	}
	write := func(next kvstore.Task) kvstore.Entry {
		t.Helper()
		rev, err := store.Update(ctx, &next, e.Revision)
		if err != nil {
			t.Fatal(err)
		}
		return kvstore.Entry{Task: next, Revision: rev}
	}
	life1, _ := kvstore.Claim(e.Task, mT0, "a", e.Revision)
	e = write(life1)
	dead, _ := kvstore.LeaseExpired(e.Task, e.Task.LeaseUntil) // no ack in time: DEAD
	e = write(dead)
	again, err := kvstore.Requeue(e.Task, mT0+60000, mT0+60000)
	if err != nil {
		t.Fatal(err)
	}
	e = write(again)
	life2, _ := kvstore.Claim(e.Task, mT0+60000, "a", e.Revision)
	e = write(life2)
	if life1.Attempt != 1 || life2.Attempt != 1 || life1.Claim == life2.Claim {
		t.Fatalf("attempts %d and %d, claims %d and %d: want attempt 1 twice under two claims",
			life1.Attempt, life2.Attempt, life1.Claim, life2.Claim)
	}
	for name, report := range map[string]func(kvstore.Task) (kvstore.Task, error){
		"ack":  func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Ack(t, life1.Claim, mT0+61000) },
		"nak":  func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Nak(t, life1.Claim, mT0+61000, 0, "") },
		"term": func(t kvstore.Task) (kvstore.Task, error) { return kvstore.Term(t, life1.Claim, mT0+61000, "") },
	} {
		if got, err := report(e.Task); !errors.Is(err, kvstore.ErrStaleAttempt) || got.Status != kvstore.StatusRunning {
			t.Errorf("late %s of the first life: %s, err %v; want ignored", name, got.Status, err)
		}
	}
	if got, err := kvstore.Ack(e.Task, life2.Claim, mT0+61000); err != nil || got.Status != kvstore.StatusSuccess {
		t.Errorf("ack of the second life: %s, err %v", got.Status, err)
	}
}

// A wall clock stepped by an hour, either way, between the claim and the report: no due time or
// lease comes before the report's own clock reading plus the wait it asked for, the lease never
// shrinks, and nothing overflows even at the end of the int64 range.
func TestMachineClockStep(t *testing.T) {
	t.Parallel()
	const hour = int64(time.Hour / time.Millisecond)
	for _, base := range []int64{mT0, math.MaxInt64 - hour/2} {
		for _, step := range []int64{hour, -hour} {
			t.Run(fmt.Sprintf("base %d step %+d", base, step), func(t *testing.T) {
				t.Parallel()
				w := machineTask(kvstore.StatusWaiting, 0)
				w.DueAt = base
				run, err := kvstore.Claim(w, base, "a", mRev)
				if err != nil {
					t.Fatal(err)
				}
				if run.LeaseUntil < base {
					t.Fatalf("lease %d ends before the claim at %d", run.LeaseUntil, base)
				}
				at := base + step
				if step > 0 && base > math.MaxInt64-step {
					at = math.MaxInt64
				}
				nak, err := kvstore.Nak(run, mRev, at, -1, "")
				if err != nil {
					t.Fatal(err)
				}
				if wantMin := min(at, math.MaxInt64-10000) + 10000; nak.DueAt < wantMin || nak.DueAt < 0 {
					t.Errorf("nak at %d: due %d, want at least %d", at, nak.DueAt, wantMin)
				}
				long, _ := kvstore.Nak(run, mRev, at, math.MaxInt64, "")
				if long.DueAt < at || long.DueAt-at > kvstore.MaxRetryDelay.Milliseconds() {
					t.Errorf("nak with the largest delay at %d: due %d, want within %v", at, long.DueAt, kvstore.MaxRetryDelay)
				}
				wpi, err := kvstore.InProgress(run, mRev, at)
				if err != nil {
					t.Fatal(err)
				}
				if wpi.LeaseUntil < run.LeaseUntil || wpi.LeaseUntil < min(at, math.MaxInt64-30000)+30000 {
					t.Errorf("in progress at %d: lease %d, was %d", at, wpi.LeaseUntil, run.LeaseUntil)
				}
				exp, err := kvstore.LeaseExpired(run, at)
				switch {
				case step < 0 && err == nil:
					t.Errorf("lease expired at %d, an hour before it began", at)
				case step > 0 && (err != nil || exp.Status != kvstore.StatusWaiting || exp.DueAt < at):
					t.Errorf("lease expiry an hour late: %s due %d, err %v", exp.Status, exp.DueAt, err)
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
	ext, err := kvstore.InProgress(in, mClaim, in.LeaseUntil-1)
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
// it runs again from attempt 1, under a new claim token.
func TestMachineExhaustDefaults(t *testing.T) {
	t.Parallel()
	task := machineTask(kvstore.StatusWaiting, 0)
	now := task.DueAt
	var waits []int64
	rev := uint64(1) // the record's revision: each write adds one
	tokens := map[uint64]bool{}
	for {
		var err error
		if task, err = kvstore.Claim(task, now, "a", rev); err != nil {
			t.Fatal(err)
		}
		tokens[task.Claim] = true
		rev++
		if task, err = kvstore.Nak(task, task.Claim, now+100, -1, ""); err != nil {
			t.Fatal(err)
		}
		rev++
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
	rev++
	if task, err = kvstore.Claim(task, now+2000, "b", rev); err != nil || task.Attempt != 1 || tokens[task.Claim] {
		t.Fatalf("claim after requeue: attempt %d, claim %d (earlier %v), err %v", task.Attempt, task.Claim, tokens, err)
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

	task, err := kvstore.Claim(task, now, "bridge-a", 1) // claims revision 1 of the record
	show("claim", task, err)
	task, err = kvstore.Nak(task, 1, now+200, -1, "nak") // the reply names claim 1
	show("nak", task, err)
	task, err = kvstore.Claim(task, now+10200, "bridge-b", 3) // revision 3: the nak wrote 2
	show("claim", task, err)
	_, err = kvstore.Ack(task, 1, now+10300) // a late ack from claim 1 changes nothing
	show("late ack", task, err)
	task, err = kvstore.Ack(task, 3, now+10300)
	show("ack", task, err)
	// Output:
	// claim          RUNNING  attempt=1 due=+0ms lease=+30000ms last_error="" err=<nil>
	// nak            WAITING  attempt=1 due=+10200ms lease=+0ms last_error="nak" err=<nil>
	// claim          RUNNING  attempt=2 due=+10200ms lease=+40200ms last_error="nak" err=<nil>
	// late ack       RUNNING  attempt=2 due=+10200ms lease=+40200ms last_error="nak" err=kvstore: stale attempt: ack of task "order-42" claim 1: the task is RUNNING under claim 3 (attempt 2)
	// ack            SUCCESS  attempt=2 due=+10200ms lease=+0ms last_error="nak" err=<nil>
}

// Unclaim gives an attempt back uncounted: WAITING at its due time, one attempt less, no lease,
// owner or claim; a stale token is refused and changes nothing.
func TestMachineUnclaim(t *testing.T) {
	t.Parallel()
	in := machineTask(kvstore.StatusRunning, 2)
	got, err := kvstore.Unclaim(in, mClaim, mNow)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Status, want.Attempt, want.LeaseUntil, want.Owner, want.Claim, want.UpdatedAt = kvstore.StatusWaiting, 1, 0, "", 0, mNow
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unclaim\n got: %+v\nwant: %+v", got, want)
	}
	if got, err := kvstore.Unclaim(in, mClaim+1, mNow); !errors.Is(err, kvstore.ErrStaleAttempt) || !reflect.DeepEqual(got, in) {
		t.Errorf("unclaim with another token: %v, %+v", err, got)
	}
}
