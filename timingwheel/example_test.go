package timingwheel_test

import (
	"fmt"

	"github.com/axbridge/axbridge/timingwheel"
)

// The owner of an index passes the time in: it takes what is due, then sleeps until the earliest
// due time left (here the time only moves forward by hand). Queue 0 holds fires, queue 1 lease
// ends; a put replaces an id's entry.
func Example() {
	const fires, leases = 0, 1
	x := timingwheel.New(2)
	x.Put(fires, timingwheel.Entry{ID: "order-42", Due: 1_000})
	x.Put(fires, timingwheel.Entry{ID: "order-7", Due: 500})
	x.Put(leases, timingwheel.Entry{ID: "pay-1", Due: 800})
	x.Put(fires, timingwheel.Entry{ID: "order-7", Due: 1_500}) // rescheduled

	for _, now := range []int64{900, 2_000} {
		for q := range 2 {
			for {
				e, ok := x.Peek(q)
				if !ok || e.Due > now {
					break
				}
				x.Pop(q)
				fmt.Printf("at %d: queue %d: %s (due %d)\n", now, q, e.ID, e.Due)
			}
		}
		if e, ok := x.Peek(fires); ok {
			fmt.Printf("at %d: sleep until %d\n", now, e.Due)
		}
	}
	fmt.Println("left:", x.Len())
	// Output:
	// at 900: queue 1: pay-1 (due 800)
	// at 900: sleep until 1000
	// at 2000: queue 0: order-42 (due 1000)
	// at 2000: queue 0: order-7 (due 1500)
	// left: 0
}

// With a wheel, Advance reports the entries that come within span of now, once each: the moment
// to prepare them (the bridge: pre-read a payload). An entry put within the window is not reported.
func ExampleNewWheel() {
	x := timingwheel.NewWheel(1, 1_000)
	x.Put(0, timingwheel.Entry{ID: "order-42", Due: 1_500})
	x.Put(0, timingwheel.Entry{ID: "order-7", Due: 5_000})
	report := func(e timingwheel.Entry) { fmt.Printf("entering: %s (due %d)\n", e.ID, e.Due) }
	x.Advance(1_000, report)
	x.Put(0, timingwheel.Entry{ID: "pay-1", Due: 1_200}) // within the window
	x.Advance(4_500, report)
	for {
		e, ok := x.Peek(0)
		if !ok || e.Due > 4_500 {
			break
		}
		x.Pop(0)
		fmt.Printf("at 4500: %s (due %d)\n", e.ID, e.Due)
	}
	// Output:
	// entering: order-42 (due 1500)
	// entering: order-7 (due 5000)
	// at 4500: pay-1 (due 1200)
	// at 4500: order-42 (due 1500)
}
