package bridge

import "testing"

func TestSlotPacksRevisionAndKind(t *testing.T) {
	for _, kind := range []jobKind{jobFire, jobPreRead, jobLease, jobRetain} {
		for _, rev := range []uint64{0, 1, 7, 1<<32 + 5, 1<<61 - 1} {
			if s := newSlot(rev, kind); s.rev() != rev || s.kind() != kind {
				t.Errorf("newSlot(%d, %d) = rev %d, kind %d", rev, kind, s.rev(), s.kind())
			}
		}
	}
}
