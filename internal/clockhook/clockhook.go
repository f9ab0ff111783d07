// Package clockhook lets this module's own tests and benchmarks make the
// scripts of a throttle or a Redis limiter decide on a clock of their
// choosing instead of the Redis server's TIME. The public options have no
// such field: a clock that only tests need is no knob for users, and an
// internal package is importable from this module alone.
//
// A package whose options hold an unexported clock registers a setter in
// its init; Set finds it by the options' type.
package clockhook

import (
	"fmt"
	"reflect"
	"sync"
	"time"
)

var setters sync.Map // reflect.Type of T -> func(any, func() time.Time)

// Register records how to set the clock of options of type T. Each
// package calls it once, from init, for its own options type.
func Register[T any](set func(opts *T, now func() time.Time)) {
	setters.Store(reflect.TypeFor[T](), func(opts any, now func() time.Time) { set(opts.(*T), now) })
}

// Set makes the scripts run with opts decide on now instead of the Redis
// server's clock, and returns opts. It panics if T's package registered no
// setter: a mistake in a test, never a condition to handle.
func Set[T any](opts *T, now func() time.Time) *T {
	set, ok := setters.Load(reflect.TypeFor[T]())
	if !ok {
		panic(fmt.Sprintf("clockhook: no clock setter for %v", reflect.TypeFor[T]()))
	}
	set.(func(any, func() time.Time))(opts, now)
	return opts
}
