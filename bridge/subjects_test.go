package bridge

import (
	"os"
	"strings"
	"testing"
)

// TestSubjectsMatchSpec checks that every subject, header and error code the bridge uses is
// written in subjects.md, the normative spec.
func TestSubjectsMatchSpec(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../subjects.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		SchedulePrefix + "<bizType>", FirePrefix + "<bizType>", RejectedPrefix + "<bizType>", RejectedPrefix + InvalidBizType,
		DuplicatePrefix + "<bizType>", DeadPrefix + "<bizType>", AckPrefix + "<bizType>.<partition>.<token>.<taskId>",
		HeaderTaskID, HeaderDelay, HeaderDeliverAt, HeaderMaxRetry, HeaderAckWait, HeaderBackoff, HeaderBizType,
		HeaderAttempt, HeaderDueAt, HeaderErrorCode, HeaderError, HeaderSubject, HeaderStatus, HeaderReplica,
		CodeBadBizType, CodeBadTaskID, CodeBadDelay, CodeBadDeliverAt, CodeDelayAndDeliverAt, CodeDueInPast,
		APIGet, APICancel, APIRequeue,
		CodeBeyondHorizon, CodeBadMaxRetry, CodeBadAckWait, CodeBadBackoff, CodePayloadTooLarge, CodeDuplicateConflict,
	}
	for _, n := range names {
		if !strings.Contains(string(spec), "`"+n+"`") {
			t.Errorf("subjects.md does not mention `%s`", n)
		}
	}
}

// Ack subjects carry the bizType first, then the task's partition, the claim token and the task
// id (which may contain dots).
func TestAckSubject(t *testing.T) {
	t.Parallel()
	if got := ackSubject("orders", 7, 77, "order.42"); got != "ax.ack.orders.7.77.order.42" {
		t.Errorf("ackSubject = %q", got)
	}
	want := ackAddr{bizType: "orders", partition: 59, token: 18446744073709551615, id: "order.42"}
	if a, ok := parseAckSubject("ax.ack.orders.59.18446744073709551615.order.42"); !ok || a != want {
		t.Errorf("parseAckSubject = %+v %v, want %+v", a, ok, want)
	}
	if a, ok := parseAckSubject(ackSubject("orders", 0, 3, "x")); !ok || a.partition != 0 || a.token != 3 || a.id != "x" {
		t.Errorf("parseAckSubject(ackSubject(orders, 0, 3, x)) = %+v %v", a, ok)
	}
	if got := ackFilter(12); got != "ax.ack.*.12.>" {
		t.Errorf("ackFilter = %q", got)
	}
	for _, bad := range []string{
		"ax.ack.orders.1", "ax.ack.orders.1.5", "ax.ack.orders.1.x.id", "ax.ack.orders.1.0.id", "ax.ack.orders.1.-1.id",
		"ax.ack.orders.1.18446744073709551616.id", "ax.ack.orders.1.2.", "ax.ack.1.3.order-42", "ax.ack..1.2.id",
		"ax.ack.orders.r1.2.id", "ax.ack.orders.-1.2.id", "ax.ack.orders.01.2.id", "ax.ack.orders.*.2.id",
		"ax.ack.orders.99999999999.2.id", "ax.fire.orders.1.2.id",
	} {
		if a, ok := parseAckSubject(bad); ok {
			t.Errorf("parseAckSubject(%q) accepted: %+v", bad, a)
		}
	}
}

func TestParseAckBody(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]ackBody{
		"":                           {kind: ackOK},
		"+ACK":                       {kind: ackOK},
		"+NXT 5":                     {kind: ackOK},
		"hello":                      {kind: ackOK},
		"-NAK":                       {kind: ackNak, delay: -1},
		`-NAK {"delay": 2500000000}`: {kind: ackNak, delay: 2500000000},
		`-NAK {"delay": -5}`:         {kind: ackNak, delay: -1},
		"+TERM":                      {kind: ackTerm},
		"+TERM bad order":            {kind: ackTerm, reason: "bad order"},
		"+WPI":                       {kind: ackProgress},
	} {
		if got := parseAckBody([]byte(body)); got != want {
			t.Errorf("parseAckBody(%q) = %+v, want %+v", body, got, want)
		}
	}
}
