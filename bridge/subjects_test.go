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
		DuplicatePrefix + "<bizType>", DeadPrefix + "<bizType>", AckPrefix + "<replica>.<attempt>.<taskId>",
		HeaderTaskID, HeaderDelay, HeaderDeliverAt, HeaderMaxRetry, HeaderAckWait, HeaderBackoff, HeaderBizType,
		HeaderAttempt, HeaderDueAt, HeaderErrorCode, HeaderError, HeaderSubject, HeaderStatus,
		CodeBadBizType, CodeBadTaskID, CodeBadDelay, CodeBadDeliverAt, CodeDelayAndDeliverAt, CodeDueInPast,
		APIGet, APICancel, APIRequeue,
		CodeBeyondHorizon, CodeBadMaxRetry, CodeBadAckWait, CodeBadBackoff, CodePayloadTooLarge, CodeDuplicateConflict,
	}
	for _, n := range names {
		if !strings.Contains(string(spec), "`"+n+"`") {
			t.Errorf("subjects.md does not mention `%s`", n)
		}
	}
	if got := ackSubject("r1", 3, "order.42"); got != "ax.ack.r1.3.order.42" {
		t.Errorf("ackSubject = %q", got)
	}
	r, a, id, ok := parseAckSubject("ax.ack.r1.3.order.42")
	if !ok || r != "r1" || a != 3 || id != "order.42" {
		t.Errorf("parseAckSubject = %q %d %q %v", r, a, id, ok)
	}
	for _, bad := range []string{"ax.ack.r1", "ax.ack.r1.x.id", "ax.ack.r1.0.id", "ax.ack.r1.2.", "ax.fire.r1.2.id"} {
		if _, _, _, ok := parseAckSubject(bad); ok {
			t.Errorf("parseAckSubject(%q) accepted", bad)
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
