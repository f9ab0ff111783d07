//go:build !race

package httpjob

// raceEnabled: the race detector is on.
const raceEnabled = false
