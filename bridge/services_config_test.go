package bridge

import (
	"strings"
	"testing"
	"time"
)

// Each service checks its own settings, and Validate reports every bad one, each by its name.
func TestConfigValidateEachService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{AckWorkers: -1}, "ack workers -1"},
		{Config{AckLogMaxAge: 10 * time.Millisecond}, "ack log max age 10ms"},
		{Config{ReplicaID: "a.b"}, `replica id "a.b"`},
		{Config{PartitionLease: 100 * time.Millisecond}, "partition lease 100ms"},
		{Config{Workers: -2}, "workers -2"},
		{Config{MaxClaims: -1}, "max claims -1"},
		{Config{PreRead: -time.Second}, "pre-read -1s"},
		{Config{ClaimAhead: 2 * time.Second}, "claim ahead 2s"},
		{Config{LeaseSkew: -time.Second}, "lease skew -1s"},
		{Config{MaxPreReadTasks: -1}, "max pre-read tasks -1"},
		{Config{ReconcileRate: -5}, "reconcile rate -5"},
		{Config{IntakeMaxDeliver: -1}, "intake max deliver -1"},
		{Config{MaxAttempts: 1000}, "max attempts 1000"},
		{Config{MaxPayload: -1}, "max payload -1"},
		{Config{PastTolerance: -time.Second}, "past tolerance -1s"},
		{Config{MaxHorizon: -time.Hour}, "max horizon -1h0m0s"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming %q", err, tc.want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := (Config{NoAckLog: true, AckLogMaxAge: time.Millisecond}).Validate(); err != nil {
		t.Errorf("no ack log: its max age is not checked, got %v", err)
	}
	err := (Config{Workers: -1, MaxPayload: -1, PartitionLease: time.Millisecond}).Validate()
	for _, want := range []string{"workers -1", "max payload -1", "partition lease 1ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("three bad settings: got %v, want each reported (%q missing)", err, want)
		}
	}
}

// New hands each service the settings of the Config it was given, after its defaults.
func TestServicesGetTheirSettings(t *testing.T) {
	t.Parallel()
	cfg := Config{AckWorkers: 3, Workers: 5, MaxClaims: 7, PartitionLease: 2 * time.Second, ReplicaID: "r1"}.withDefaults()
	if got := cfg.acks(); got.Workers != 3 || got.Log != "AX_ACKS" || got.LogMaxAge != 2*time.Minute {
		t.Errorf("acks: %+v", got)
	}
	if got := cfg.members(); got.Replica != "r1" || got.Lease != 2*time.Second {
		t.Errorf("members: %+v", got)
	}
	if got := cfg.sched(); got.Workers != 5 || got.MaxClaims != 7 || got.PreRead != 2*time.Second {
		t.Errorf("sched: %+v", got)
	}
	if got := cfg.intake(); got.Stream != "AX_SCHEDULE" || got.Consumer != "axbridge" || got.MaxAttempts != 4 {
		t.Errorf("intake: %+v", got)
	}
}
