package kvstore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
)

func fairOp(class, key string) groupOp {
	return groupOp{op: &asyncOp{class: class}, msg: &nats.Msg{Subject: key}}
}

// A burst of one class does not hold back another's: writes come out in turn, each class in its
// own order.
func TestFairQueueTakesTurns(t *testing.T) {
	q := newFairQueue()
	for i := range 5 {
		q.push(fairOp("reports", fmt.Sprintf("r%d", i)))
	}
	q.push(fairOp("orders", "o0"))
	q.push(fairOp("orders", "o1"))
	var got []string
	for q.len() > 0 {
		got = append(got, q.pop().msg.Subject)
	}
	if want := []string{"r0", "o0", "r1", "o1", "r2", "r3", "r4"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// A batch takes in turn, one write per key: a class whose next write is to a key already in the
// batch stops for it, and its writes keep their order for the next batch.
func TestFairQueueCutKeepsKeyOrder(t *testing.T) {
	q := newFairQueue()
	for _, k := range []string{"a", "a", "b"} {
		q.push(fairOp("x", k))
	}
	q.push(fairOp("y", "c"))
	q.push(fairOp("y", "d"))
	subjects := func(b []groupOp) []string {
		var s []string
		for _, o := range b {
			s = append(s, o.msg.Subject)
		}
		return s
	}
	if got := subjects(q.cut(10)); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("first batch %v, want a c d", got)
	}
	if got := subjects(q.cut(10)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("second batch %v, want a b", got)
	}
	if q.len() != 0 {
		t.Fatalf("%d left", q.len())
	}
	for i := range 5 {
		q.push(fairOp("z", fmt.Sprint(i)))
	}
	if got := subjects(q.cut(2)); !slices.Equal(got, []string{"0", "1"}) || q.len() != 3 {
		t.Fatalf("a batch of at most 2: %v, %d left", got, q.len())
	}
}
