package bridge

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"
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
		APIGet, APICancel, APIRequeue, APIReschedule,
		HeaderEvery, HeaderCron, HeaderTimeZone, HeaderMisfire, HeaderCatchup, HeaderOverlap, HeaderMaxRuns,
		HeaderUntil, HeaderJitter, HeaderOccurrence, HeaderRun,
		CodeBadEvery, CodeBadCron, CodeBadTimeZone, CodeEveryAndCron, CodeBadSeriesPolicy,
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
	ax := subjectsOf(DefaultPrefix)
	ackSubject, parseAckSubject, ackFilter := ax.ackSubject, ax.parseAckSubject, ax.ackFilter
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

// The subjects of the default prefix are the constants; those of another prefix are the same with
// that prefix, and neither prefix's parsers accept the other's subjects.
func TestSubjectsOfPrefix(t *testing.T) {
	t.Parallel()
	ax := subjectsOf(DefaultPrefix)
	for got, want := range map[string]string{
		ax.schedule: SchedulePrefix, ax.fire: FirePrefix, ax.ack: AckPrefix, ax.rejected: RejectedPrefix,
		ax.duplicate: DuplicatePrefix, ax.dead: DeadPrefix, ax.api: APIPrefix, ax.service: "axbridge", ax.audit: AuditPrefix,
	} {
		if got != want {
			t.Errorf("default prefix: %q, want the constant %q", got, want)
		}
	}
	b2 := subjectsOf("b2")
	for got, want := range map[string]string{
		b2.schedule: "b2.schedule.", b2.fire: "b2.fire.", b2.ack: "b2.ack.", b2.rejected: "b2.rejected.",
		b2.duplicate: "b2.duplicate.", b2.dead: "b2.dead.", b2.api: "b2.api.task", b2.service: "b2bridge", b2.audit: "b2.audit.",
		b2.ackSubject("orders", 3, 9, "a.b"): "b2.ack.orders.3.9.a.b", b2.ackFilter(3): "b2.ack.*.3.>",
	} {
		if got != want {
			t.Errorf("prefix b2: %q, want %q", got, want)
		}
	}
	if a, ok := b2.parseAckSubject("b2.ack.orders.3.9.a.b"); !ok || a != (ackAddr{bizType: "orders", partition: 3, token: 9, id: "a.b"}) {
		t.Errorf("b2 parseAckSubject = %+v %v", a, ok)
	}
	if a, ok := b2.parseAckSubject(ax.ackSubject("orders", 3, 9, "x")); ok {
		t.Errorf("b2 accepted an ax ack subject: %+v", a)
	}
	if a, ok := ax.parseAckSubject(b2.ackSubject("orders", 3, 9, "x")); ok {
		t.Errorf("ax accepted a b2 ack subject: %+v", a)
	}
	if biz, ok := b2.cutSchedule("b2.schedule.orders"); !ok || biz != "orders" {
		t.Errorf("b2 cutSchedule(b2.schedule.orders) = %q %v", biz, ok)
	}
	if _, ok := b2.cutSchedule("ax.schedule.orders"); ok {
		t.Error("b2 cutSchedule accepted ax.schedule.orders")
	}
	if !b2.coversSchedule([]string{"b2.>"}) || !b2.coversSchedule([]string{"b2.schedule.>"}) || b2.coversSchedule([]string{"ax.schedule.>"}) {
		t.Error("b2 coversSchedule: wrong on b2.>, b2.schedule.> or ax.schedule.>")
	}
}

// The prefix is one subject token, and the default stream and consumer names derive from it.
func TestConfigPrefix(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.Prefix != "ax" || c.Stream != "AX_SCHEDULE" || c.Consumer != "axbridge" {
		t.Errorf("defaults: prefix %q stream %q consumer %q", c.Prefix, c.Stream, c.Consumer)
	}
	c = Config{Prefix: "b2"}.withDefaults()
	if c.Stream != "B2_SCHEDULE" || c.Consumer != "b2bridge" || c.subj.schedule != "b2.schedule." {
		t.Errorf("prefix b2: stream %q consumer %q schedule %q", c.Stream, c.Consumer, c.subj.schedule)
	}
	if c := (Config{Prefix: "b2", Stream: "S", Consumer: "C"}).withDefaults(); c.Stream != "S" || c.Consumer != "C" {
		t.Errorf("given names replaced: stream %q consumer %q", c.Stream, c.Consumer)
	}
	for _, p := range []string{"ax", "b2", "A-b_9", strings.Repeat("p", 64)} {
		if err := (Config{Prefix: p}).Validate(); err != nil {
			t.Errorf("prefix %q refused: %v", p, err)
		}
	}
	for _, p := range []string{"a.b", "a b", "a*", ">", "ä", strings.Repeat("p", 65)} {
		if err := (Config{Prefix: p}).Validate(); err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("prefix %q: err %v, want a prefix error", p, err)
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
	// A reason is cut to 1 KiB at a UTF-8 boundary (review N12).
	long := parseAckBody([]byte("+TERM " + strings.Repeat("é", 900_000)))
	if len(long.reason) > maxReason || !utf8.ValidString(long.reason) || !strings.HasSuffix(long.reason, "…") {
		t.Errorf("a 1.8 MB reason became %d bytes (valid UTF-8 %v)", len(long.reason), utf8.ValidString(long.reason))
	}
}
