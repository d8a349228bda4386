// Package bench compares timingwheel with Go runtime timers (time.AfterFunc),
// a container/heap baseline and go-zero's collection.TimingWheel at one
// million pending entries. It is a separate module so that the main module
// keeps no third-party dependency for it; see README.md for how to run it.
package bench
