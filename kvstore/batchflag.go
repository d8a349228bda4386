package kvstore

import (
	"fmt"
	"strconv"
)

// BatchMaxFlag is a flag.Value for Config.BatchMax, as `--write-batch` takes it: "auto"
// (BatchAuto) or a batch size of 1 to 1000.
type BatchMaxFlag int

func (f *BatchMaxFlag) String() string {
	if f == nil || *f == BatchAuto {
		return "auto"
	}
	return strconv.Itoa(int(*f))
}

func (f *BatchMaxFlag) Set(s string) error {
	if s == "auto" {
		*f = BatchAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxBatchSize {
		return fmt.Errorf("want auto or 1-%d", maxBatchSize)
	}
	*f = BatchMaxFlag(n)
	return nil
}
