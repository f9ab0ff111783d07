//go:build race

package httpjob

// raceEnabled: the race detector is on, and sync.Pool drops items at
// random, so allocation counts vary.
const raceEnabled = true
