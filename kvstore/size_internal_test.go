package kvstore

import (
	"math"
	"strings"
	"testing"
	"time"
)

// msgLen is what the server's max_payload counts of m: the value and the encoded headers.
func msgLen(t *testing.T, s *JetStore, task *Task) int {
	t.Helper()
	val, err := EncodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	m := s.putMsg(task, Key(task.ID, 60), val, math.MaxUint64)
	n := len(m.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// Every state a task's later writes give it fits in MaxMessageLen of its WAITING record: claimed,
// nakked, terminated with the longest reason of control bytes, requeued and claimed again with that
// reason kept, acked; with a metadata line short enough to be repeated as HdrRecord and one longer.
func TestMaxMessageLenBoundsLaterStates(t *testing.T) {
	s := &JetStore{prefix: "$KV.AX_TASKS.", retentionTTL: (400 * 24 * time.Hour).String()}
	for _, meta := range []int{10, 3000, 7000, 9000} {
		w := Task{ID: "task-1", BizType: "orders", Payload: []byte(strings.Repeat("p", 2000)), Status: StatusWaiting,
			DueAt: 1767225600000, MaxRetry: 3, AckWait: time.Minute, Backoff: DefaultBackoff(), CreatedAt: 1767225600000,
			UpdatedAt: 1767225600000, Fingerprint: "sha256:00", Header: map[string][]string{"Meta": {strings.Repeat("m", meta)}}}
		limit, err := MaxMessageLen(&w)
		if err != nil {
			t.Fatal(err)
		}
		owner := strings.Repeat("r", MaxOwnerLen)
		now := int64(math.MaxInt64 / 2)
		states := []Task{w}
		step := func(next Task, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, next)
		}
		step(Claim(w, now, owner, math.MaxUint64))
		step(Nak(states[len(states)-1], math.MaxUint64, now, 0, "nak"))
		step(Claim(states[len(states)-1], now, owner, math.MaxUint64-1))
		step(Term(states[len(states)-1], math.MaxUint64-1, now, strings.Repeat("\x01", MaxReasonLen)))
		step(Requeue(states[len(states)-1], now, now))
		step(Claim(states[len(states)-1], now, owner, math.MaxUint64-2))
		step(Ack(states[len(states)-1], math.MaxUint64-2, now))
		step(Abandon(states[len(states)-2], now, strings.Repeat("\x01", MaxReasonLen)))
		for _, st := range states {
			if n := msgLen(t, s, &st); n > limit {
				t.Errorf("meta %d: %s record's message is %d bytes, over MaxMessageLen %d", meta, st.Status, n, limit)
			}
		}
	}
}
