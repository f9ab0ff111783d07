// Package names holds sluice's one check of a name: a queue's, a
// downstream's, a metrics class's, a job's type or id, and the ids that
// keyspace keeps verbatim in a Redis key. Such names go into Redis keys,
// hash tags and metric labels as they are, so they are limited to letters,
// digits and a few punctuation bytes that mean nothing there.
package names

import "strings"

// MaxLen is the longest queue or downstream name, in bytes.
const MaxLen = 64

// Valid reports whether s is 1 to max bytes, each an ASCII letter or
// digit, '_', '.', '-', or one of the bytes of extra: [A-Za-z0-9_.-] when
// extra is empty.
func Valid(s string, max int, extra string) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range []byte(s) {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && strings.IndexByte("_.-", c) < 0 && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}
