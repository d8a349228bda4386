package kvstore

import (
	"fmt"
	"strconv"
)

// BatchMaxFlag is a flag.Value for Config.BatchMax, as `--write-batch` takes it: the most writes
// in one atomic batch, 1 to 1000 (1: never grouped).
type BatchMaxFlag int

func (f *BatchMaxFlag) String() string {
	if f == nil || *f == 0 {
		return strconv.Itoa(DefaultBatchMax)
	}
	return strconv.Itoa(int(*f))
}

func (f *BatchMaxFlag) Set(s string) error {
	if s == "auto" {
		return fmt.Errorf("auto is gone: the store groups writes by itself while they queue (group commit); give 1-%d, the most in one batch, or 1 never to group", maxBatchSize)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxBatchSize {
		return fmt.Errorf("want 1-%d", maxBatchSize)
	}
	*f = BatchMaxFlag(n)
	return nil
}
