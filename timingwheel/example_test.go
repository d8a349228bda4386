package timingwheel_test

import (
	"fmt"
	"time"

	"github.com/axbridge/axbridge/timingwheel"
)

// The wheel never reads the clock: the caller passes the time in.
func Example() {
	start := time.Now()
	w := timingwheel.New[string](start, timingwheel.Options{})
	w.Add("order-42", start.Add(30*time.Minute), "close order 42")
	w.Add("coupon-7", start.Add(1500*time.Millisecond), "remind coupon 7")
	w.Add("retry-3", start.Add(10*time.Second), "retry call 3")
	w.Remove("retry-3")

	next, _ := w.Next()
	fmt.Println("next in", next.Sub(start))

	w.Advance(start.Add(31*time.Minute), func(id string, due time.Time, v string) {
		fmt.Printf("%s due +%v: %s\n", id, due.Sub(start), v)
	})
	fmt.Println("pending:", w.Len())
	// Output:
	// next in 1.5s
	// coupon-7 due +1.5s: remind coupon 7
	// order-42 due +30m0s: close order 42
	// pending: 0
}

// The owner loop: one goroutine owns the wheel and one timer armed to Next.
// New work arrives on a channel; the bridge's scheduling loop has this shape.
func Example_ownerLoop() {
	start := time.Now()
	w := timingwheel.New[int](start, timingwheel.Options{})

	type request struct {
		id    string
		delay time.Duration
	}
	intake := make(chan request, 3) // written by producers, read by the loop
	intake <- request{"b", 2 * time.Millisecond}
	intake <- request{"a", 1 * time.Millisecond}
	intake <- request{"c", 3 * time.Millisecond}
	close(intake)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	arm := func() {
		if next, ok := w.Next(); ok {
			timer.Reset(time.Until(next))
		}
	}
	for fired := 0; fired < 3; {
		select {
		case r, ok := <-intake:
			if !ok {
				intake = nil
				continue
			}
			w.AddAfter(r.id, time.Now(), r.delay, 0)
		case now := <-timer.C:
			w.Advance(now, func(id string, due time.Time, _ int) {
				fmt.Println("fire", id, "early:", now.Before(due))
				fired++
			})
		}
		arm()
	}
	// Output:
	// fire a early: false
	// fire b early: false
	// fire c early: false
}
