package main

import (
	"fmt"
	"strconv"

	"github.com/axbridge/axbridge/kvstore"
)

// writeBatchFlag is --write-batch: "auto" (kvstore.BatchAuto) or a batch size of 1-1000.
type writeBatchFlag int

func (f *writeBatchFlag) String() string {
	if f == nil || *f == kvstore.BatchAuto {
		return "auto"
	}
	return strconv.Itoa(int(*f))
}

func (f *writeBatchFlag) Set(s string) error {
	if s == "auto" {
		*f = kvstore.BatchAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		return fmt.Errorf("want auto or 1-1000")
	}
	*f = writeBatchFlag(n)
	return nil
}
