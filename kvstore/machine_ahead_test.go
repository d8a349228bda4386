package kvstore_test

import (
	"testing"

	"github.com/axbridge/axbridge/kvstore"
)

// A claim written ahead of the due time leases the attempt from the due time on, so the attempt is
// as long as one claimed at the due instant; a claim after the due time leases it from the claim.
func TestClaimLeaseCountsFromTheDueTime(t *testing.T) {
	t.Parallel()
	ackWait := kvstore.DefaultAckWait.Milliseconds()
	for _, c := range []struct {
		name string
		now  int64
		want int64
	}{
		{"ahead of the due time", mT0 - 80, mT0 + ackWait},
		{"at the due time", mT0, mT0 + ackWait},
		{"after the due time", mNow, mNow + ackWait},
	} {
		got, err := kvstore.Claim(machineTask(kvstore.StatusWaiting, 0), c.now, "a", mRev)
		if err != nil {
			t.Fatal(err)
		}
		if got.LeaseUntil != c.want || got.UpdatedAt != c.now {
			t.Errorf("%s: lease until %d, updated %d; want %d, %d", c.name, got.LeaseUntil, got.UpdatedAt, c.want, c.now)
		}
	}
}
