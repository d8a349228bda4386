package integration

import (
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/kvstore"
)

// An ack that reached NATS while the replica that fired the task could not apply it settles the
// attempt all the same: the bridge process is stopped (SIGSTOP) at the first fire, so that it
// applies none of the acks that follow, then killed with SIGKILL and started again. With the ack
// log (the default) the restarted replica finds each ack when the attempt's lease ends and no task
// fires twice; without it (--ack-log off) every acked task fires again.
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
			var once sync.Once
			sub, err := e.nc.Subscribe(bridge.FirePrefix+biz, func(m *nats.Msg) {
				once.Do(func() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) })
				a, _ := strconv.Atoi(m.Header.Get(bridge.HeaderAttempt))
				id := m.Header.Get(bridge.HeaderTaskID)
				mu.Lock()
				attempts[id] = append(attempts[id], a)
				mu.Unlock()
				_ = m.Ack()
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = sub.SetPendingLimits(-1, -1)
			t.Cleanup(func() { _ = sub.Unsubscribe() })

			// One due instant, so that most fires go out together, before the stop takes effect.
			const n = 20
			due := strconv.FormatInt(time.Now().Add(1500*time.Millisecond).UnixMilli(), 10)
			ids := make([]string, n)
			for i := range ids {
				ids[i] = biz + "-" + strconv.Itoa(i)
				e.schedule(biz, ids[i], bridge.HeaderTaskID, ids[i], bridge.HeaderDeliverAt, due,
					bridge.HeaderAckWait, "2s", bridge.HeaderBackoff, "100ms")
			}
			if !checkFor(20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) > 0 }) {
				t.Fatal("nothing fired")
			}
			// The fires sent before the stop arrive and are acked: wait until no more come and
			// (with the log) NATS holds every ack.
			last := -1
			checkFor(5*time.Second, func() bool {
				_ = e.nc.Flush()
				mu.Lock()
				n := len(attempts)
				mu.Unlock()
				settled := n == last && (tc.repeats || e.streamMsgs("AX_ACKS") == uint64(n))
				last = n
				return settled
			})
			mu.Lock()
			for id := range attempts {
				ackedBeforeKill = append(ackedBeforeKill, id)
			}
			mu.Unlock()
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
