package bridge

import (
	"fmt"
	"strconv"
	"strings"
)

// Subjects and headers of the wire protocol. subjects.md is the normative spec; subjects_test.go
// checks that every constant here appears there.
//
// The subject constants are those of the default prefix, DefaultPrefix. A bridge uses the ones of
// its Config.Prefix (subjectsOf), so that deployments with different prefixes share an account.
const (
	// DefaultPrefix is the first token of every subject unless Config.Prefix says otherwise.
	DefaultPrefix = "ax"

	SchedulePrefix  = DefaultPrefix + ".schedule."
	FirePrefix      = DefaultPrefix + ".fire."
	AckPrefix       = DefaultPrefix + ".ack."
	RejectedPrefix  = DefaultPrefix + ".rejected."
	DuplicatePrefix = DefaultPrefix + ".duplicate."
	DeadPrefix      = DefaultPrefix + ".dead."
	AlarmPrefix     = DefaultPrefix + ".alarm."
	// InvalidBizType is the token used on ax.rejected.* when the bizType itself is invalid.
	InvalidBizType = "_invalid"

	HeaderTaskID    = "Ax-Task-Id"
	HeaderDelay     = "Ax-Delay"
	HeaderDeliverAt = "Ax-Deliver-At"
	HeaderMaxRetry  = "Ax-Max-Retry"
	HeaderAckWait   = "Ax-Ack-Wait"
	HeaderBackoff   = "Ax-Backoff"
	HeaderBizType   = "Ax-Biz-Type"
	HeaderAttempt   = "Ax-Attempt"
	HeaderDueAt     = "Ax-Due-At"
	HeaderErrorCode = "Ax-Error-Code"
	HeaderError     = "Ax-Error"
	HeaderSubject   = "Ax-Subject"
	HeaderStatus    = "Ax-Status"
	HeaderReplica   = "Ax-Replica"
	HeaderFiredAt   = "Ax-Fired-At"
	// HeaderAck is on the bridge's answer to a sync ack: AckApplied or AckStale.
	HeaderAck = "Ax-Ack"

	AckApplied = "applied" // the reply's new state is durable
	AckStale   = "stale"   // the reply was ignored: its attempt is over, or it named another bizType

	// DueAtLayout is the format of Ax-Due-At: RFC 3339, UTC, milliseconds.
	DueAtLayout = "2006-01-02T15:04:05.000Z07:00"
)

// controlHeaders are consumed by the bridge and not passed through as the caller's own.
var controlHeaders = [...]string{HeaderTaskID, HeaderDelay, HeaderDeliverAt, HeaderMaxRetry, HeaderAckWait, HeaderBackoff,
	HeaderEvery, HeaderCron, HeaderTimeZone, HeaderMisfire, HeaderCatchup, HeaderOverlap, HeaderMaxRuns, HeaderUntil,
	HeaderJitter, HeaderReplace}

func isControlHeader(k string) bool {
	for _, h := range controlHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// validBizType reports whether s is one subject token of 1–64 characters from [A-Za-z0-9_-].
func validBizType(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// subjects are the subjects of one deployment, each under its prefix (the ax. of the constants).
type subjects struct {
	prefix                                         string // one token, no dot
	schedule, fire, ack, rejected, duplicate, dead string // each ends with a dot
	api                                            string // the task API's group, prefix.api.task
	apiBiz                                         string // the settings API's group, prefix.api.biz
	alarm, stats                                   string // prefix.alarm., prefix.stats. (alarm.go)
	audit                                          string // prefix.audit. (bulk.go)
	service                                        string // the micro service's name and queue group, prefix + "bridge"
}

// subjectsOf are the subjects under prefix; subjectsOf(DefaultPrefix) are the constants.
func subjectsOf(prefix string) subjects {
	p := prefix + "."
	return subjects{
		prefix:    prefix,
		schedule:  p + "schedule.",
		fire:      p + "fire.",
		ack:       p + "ack.",
		rejected:  p + "rejected.",
		duplicate: p + "duplicate.",
		dead:      p + "dead.",
		api:       p + "api.task",
		apiBiz:    p + "api.biz",
		alarm:     p + "alarm.",
		stats:     p + "stats.",
		audit:     p + "audit.",
		service:   prefix + "bridge",
	}
}

// CheckPrefix reports whether p can be a subject prefix (Config.Prefix): one subject token of
// 1-64 characters from [A-Za-z0-9_-], which also makes it part of valid stream and bucket names.
func CheckPrefix(p string) error {
	if !validBizType(p) {
		return fmt.Errorf("prefix %q: want one subject token of 1-64 characters from [A-Za-z0-9_-]", p)
	}
	return nil
}

// ackSubject is the reply subject of one fire: ax.ack.<bizType>.<partition>.<token>.<taskId>,
// where partition is the task's partition (the replica that owns it subscribes to its acks) and
// token the claim's fencing token (kvstore.Task.Claim). The bizType comes first so that NATS
// permissions can scope a consumer to the acks of its own bizType. The task id may contain dots;
// it is always the rest of the subject.
func (s subjects) ackSubject(bizType string, partition int, token uint64, id string) string {
	return s.ack + bizType + "." + strconv.Itoa(partition) + "." + strconv.FormatUint(token, 10) + "." + id
}

// ackFilter is the subject filter of the acks to fires of tasks in partition p.
func (s subjects) ackFilter(p int) string { return s.ack + "*." + strconv.Itoa(p) + ".>" }

// ackAddr is what an ack subject names.
type ackAddr struct {
	bizType   string
	partition int
	token     uint64
	id        string
}

// parseAckSubject is the inverse of ackSubject.
func (s subjects) parseAckSubject(subj string) (ackAddr, bool) {
	var a ackAddr
	rest, ok := strings.CutPrefix(subj, s.ack)
	if !ok {
		return a, false
	}
	var part, tok string
	a.bizType, rest, _ = strings.Cut(rest, ".")
	part, rest, _ = strings.Cut(rest, ".")
	tok, a.id, _ = strings.Cut(rest, ".")
	if !validBizType(a.bizType) || a.id == "" {
		return ackAddr{}, false
	}
	p, err := strconv.ParseUint(part, 10, 31)
	if err != nil || (len(part) > 1 && part[0] == '0') {
		return ackAddr{}, false
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || n == 0 {
		return ackAddr{}, false
	}
	a.partition, a.token = int(p), n
	return a, true
}
