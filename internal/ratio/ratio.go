// Package ratio reduces rates to lowest terms, the form in which the Lua
// scripts count exactly: a rate of limit units per period microseconds
// becomes rl units per pr microseconds with gcd(rl, pr) = 1.
package ratio

// Reduce returns a/g and b/g where g is the greatest common divisor of the
// positive integers a and b.
func Reduce(a, b int64) (int64, int64) {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x, b / x
}
