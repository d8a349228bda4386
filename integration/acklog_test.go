package integration

import (
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/internal/procs"
	"github.com/axbridge/axbridge/kvstore"
)

// An ack that reached NATS while the replica that fired the task could not apply it settles the
// attempt all the same: the bridge process is stopped (SIGSTOP) once its fires arrived, and they
// are acked once it is stopped, so it applies none of the acks; then it is killed with SIGKILL
// and started again. With the ack log (the default) the restarted replica finds each ack when the
// attempt's lease ends and no task fires twice; without it (--ack-log off) every acked task fires
// again.
func TestAckSurvivesKill9(t *testing.T) {
	t.Parallel()
	bin := buildBridge(t)
	for _, tc := range []struct {
		name    string
		flags   []string
		repeats bool
	}{
		{name: "log", repeats: false},
		{name: "off", flags: []string{"--ack-log", "off"}, repeats: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			dir := t.TempDir()
			p := startProcess(t, bin, e.srv.ClientURL(), dir, tc.flags...)
			biz := "acklog" + tc.name
			var mu sync.Mutex
			attempts := map[string][]int{}
			var ackedBeforeKill []string
			var held []*nats.Msg // fires of the first attempt, acked once the bridge is stopped
			holding := true
			sub, err := e.nc.Subscribe(bridge.FirePrefix+biz, func(m *nats.Msg) {
				a, _ := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
				id := m.Header.Get(bridge.HeaderTaskID)
				mu.Lock()
				defer mu.Unlock()
				attempts[id] = append(attempts[id], a)
				if holding {
					held = append(held, m)
					return
				}
				_ = m.Ack()
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = sub.SetPendingLimits(-1, -1)
			t.Cleanup(func() { _ = sub.Unsubscribe() })

			// One due instant, so that the fires go out together.
			const n = 20
			due := strconv.FormatInt(time.Now().Add(1500*time.Millisecond).UnixMilli(), 10)
			ids := make([]string, n)
			for i := range ids {
				ids[i] = biz + "-" + strconv.Itoa(i)
				e.schedule(biz, ids[i], bridge.HeaderTaskID, ids[i], bridge.HeaderDeliverAt, due,
					bridge.HeaderAckWait, "2s", bridge.HeaderBackoff, "100ms")
			}
			fired := func() int { mu.Lock(); defer mu.Unlock(); return len(held) }
			if !checkFor(20*time.Second, func() bool { return fired() > 0 }) {
				t.Fatal("nothing fired")
			}
			// Wait for the burst (up to all n, or no more for a while), stop the bridge, and ack
			// what it sent only once the stop took effect: a signalled process runs on for a
			// while, and could apply them.
			last, same := -1, 0
			checkFor(5*time.Second, func() bool {
				k := fired()
				if k == last {
					same++
				} else {
					last, same = k, 0
				}
				return k == n || same >= 20
			})
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			if !checkFor(10*time.Second, func() bool { s, err := procs.Stopped(p.cmd.Process.Pid); return err == nil && s }) {
				t.Fatal("the bridge did not stop on SIGSTOP")
			}
			mu.Lock()
			holding = false
			for _, m := range held {
				_ = m.Ack()
				ackedBeforeKill = append(ackedBeforeKill, m.Header.Get(bridge.HeaderTaskID))
			}
			mu.Unlock()
			// With the log, NATS holds every ack before the kill.
			if !tc.repeats && !checkFor(10*time.Second, func() bool { return e.streamMsgs("AX_ACKS") == uint64(len(ackedBeforeKill)) }) {
				t.Fatalf("the ack log holds %d of %d acks", e.streamMsgs("AX_ACKS"), len(ackedBeforeKill))
			}
			_ = e.nc.Flush()
			p.kill9(t)
			p2 := startProcess(t, bin, e.srv.ClientURL(), dir, tc.flags...)
			e.waitAll(ids, kvstore.StatusSuccess, 60*time.Second)
			p2.stop(t)

			mu.Lock()
			defer mu.Unlock()
			again := 0
			for _, id := range ackedBeforeKill {
				if len(attempts[id]) > 1 {
					again++
				}
			}
			t.Logf("%d of %d tasks fired and acked while their replica was stopped; %d fired again after its kill -9", len(ackedBeforeKill), n, again)
			switch {
			case tc.repeats && again != len(ackedBeforeKill):
				t.Errorf("without the ack log, %d of the %d acks the dead replica never wrote were retried; want all", again, len(ackedBeforeKill))
			case !tc.repeats && again != 0:
				t.Errorf("%d tasks acked before their replica's kill -9 fired again: the ack log did not settle them", again)
			}
		})
	}
}
