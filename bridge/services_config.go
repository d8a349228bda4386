package bridge

import (
	"errors"
	"fmt"
	"time"
)

// Each service's settings, cut from the Bridge's Config (after its defaults) by New. Config's
// validate is each service's validate in turn, so that a setting is checked where it is used.

// acksConfig is the acks service's: the ack workers and the ack log.
type acksConfig struct {
	Workers   int           // goroutines applying consumer replies
	Log       string        // the ack log's stream; "" when NoLog
	NoLog     bool          // run without the ack log
	LogMaxAge time.Duration // how long the log keeps a reply
}

func (c acksConfig) validate() []error {
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("ack workers %d: want at least 1", c.Workers))
	}
	if !c.NoLog && c.LogMaxAge < time.Second {
		errs = append(errs, fmt.Errorf("ack log max age %v: want at least 1s", c.LogMaxAge))
	}
	return errs
}

// membersConfig is the members service's: who this replica is and how long it counts as alive.
type membersConfig struct {
	Replica string
	Lease   time.Duration
}

func (c membersConfig) validate() []error {
	var errs []error
	if !validBizType(c.Replica) {
		errs = append(errs, fmt.Errorf("replica id %q: want 1-64 characters of [A-Za-z0-9_-]", c.Replica))
	}
	if c.Lease < 500*time.Millisecond {
		errs = append(errs, fmt.Errorf("partition lease %v: want at least 500ms", c.Lease))
	}
	return errs
}

// schedConfig is the sched service's: the loop, its core and index, the fire workers and the
// reconciler.
type schedConfig struct {
	Workers           int
	MaxClaims         int
	PreRead           time.Duration
	ClaimAhead        time.Duration // negative: off
	LeaseSkew         time.Duration
	MaxPreReadTasks   int
	MaxPreReadBytes   int
	WatchTimeout      time.Duration
	ReconcileInterval time.Duration
	ReconcileGrace    time.Duration
	ReconcileRate     int
}

func (c schedConfig) validate() []error {
	var errs []error
	check := func(bad bool, format string, v any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, v))
		}
	}
	check(c.Workers < 1, "workers %d: want at least 1", c.Workers)
	check(c.MaxClaims < 1, "max claims %d: want at least 1", c.MaxClaims)
	check(c.PreRead < 0, "pre-read %v: want 0 or more", c.PreRead)
	check(c.ClaimAhead > maxClaimAhead, "claim ahead %v: want at most "+maxClaimAhead.String()+" (negative: off)", c.ClaimAhead)
	check(c.LeaseSkew < 0, "lease skew %v: want 0 or more", c.LeaseSkew)
	check(c.MaxPreReadTasks < 1, "max pre-read tasks %d: want at least 1", c.MaxPreReadTasks)
	check(c.MaxPreReadBytes < 1, "max pre-read bytes %d: want at least 1", c.MaxPreReadBytes)
	check(c.WatchTimeout <= 0, "watch timeout %v: want more than 0", c.WatchTimeout)
	check(c.ReconcileInterval <= 0, "reconcile interval %v: want more than 0", c.ReconcileInterval)
	check(c.ReconcileGrace < 0, "reconcile grace %v: want 0 or more", c.ReconcileGrace)
	check(c.ReconcileRate < 1, "reconcile rate %d: want at least 1 record a second", c.ReconcileRate)
	return errs
}

// intakeConfig is the intake service's: the intake consumer and what a new task may be.
type intakeConfig struct {
	Stream, Consumer string
	MaxDeliver       int
	MaxAttempts      int
	AckWait          time.Duration
	Backoff          []time.Duration
	MaxPayload       int
	PastTolerance    time.Duration
	MaxHorizon       time.Duration
}

func (c intakeConfig) validate() []error {
	var errs []error
	if c.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("intake max deliver %d: want at least 1", c.MaxDeliver))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > maxMaxRetry+1 {
		errs = append(errs, fmt.Errorf("max attempts %d (max retry %d): want max retry 0-%d", c.MaxAttempts, c.MaxAttempts-1, maxMaxRetry))
	}
	for _, err := range []error{checkAckWait(c.AckWait), checkBackoff(c.Backoff)} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxPayload < 1 {
		errs = append(errs, fmt.Errorf("max payload %d: want at least 1 byte", c.MaxPayload))
	}
	if c.PastTolerance < 0 {
		errs = append(errs, fmt.Errorf("past tolerance %v: want 0 or more", c.PastTolerance))
	}
	if c.MaxHorizon <= 0 {
		errs = append(errs, fmt.Errorf("max horizon %v: want more than 0", c.MaxHorizon))
	}
	return errs
}

func (c Config) acks() acksConfig {
	return acksConfig{Workers: c.AckWorkers, Log: c.AckLog, NoLog: c.NoAckLog, LogMaxAge: c.AckLogMaxAge}
}

func (c Config) members() membersConfig {
	return membersConfig{Replica: c.ReplicaID, Lease: c.PartitionLease}
}

func (c Config) sched() schedConfig {
	return schedConfig{Workers: c.Workers, MaxClaims: c.MaxClaims, PreRead: c.PreRead,
		ClaimAhead: c.ClaimAhead, LeaseSkew: c.LeaseSkew,
		MaxPreReadTasks: c.MaxPreReadTasks, MaxPreReadBytes: c.MaxPreReadBytes,
		WatchTimeout:      c.WatchTimeout,
		ReconcileInterval: c.ReconcileInterval, ReconcileGrace: c.ReconcileGrace, ReconcileRate: c.ReconcileRate}
}

func (c Config) intake() intakeConfig {
	return intakeConfig{Stream: c.Stream, Consumer: c.Consumer, MaxDeliver: c.IntakeMaxDeliver,
		MaxAttempts: c.MaxAttempts, AckWait: c.AckWait, Backoff: c.Backoff, MaxPayload: c.MaxPayload,
		PastTolerance: c.PastTolerance, MaxHorizon: c.MaxHorizon}
}

// validate reports every invalid setting, each service's in turn.
func (c Config) validate() error {
	var errs []error
	if err := CheckPrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.acks().validate()...)
	errs = append(errs, c.members().validate()...)
	errs = append(errs, c.sched().validate()...)
	errs = append(errs, c.intake().validate()...)
	if c.AlarmWindow < time.Second {
		errs = append(errs, fmt.Errorf("alarm window %v: want at least 1s", c.AlarmWindow))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bridge config: %w", err)
	}
	return nil
}
