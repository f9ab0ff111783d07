package redisconn

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// StartEmbedded starts an in-memory Redis (miniredis) on a free loopback
// port, without a password, and returns a client of it and the function
// that closes both. For trials and the demo: every key in it is lost when
// it stops.
func StartEmbedded() (client *redis.Client, stop func(), err error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return client, func() { client.Close(); m.Close() }, nil
}

// EmbeddedWarning is what a command says when it started an embedded
// Redis at addr.
func EmbeddedWarning(addr string) string {
	return fmt.Sprintf("sluice: WARNING: started an embedded Redis (miniredis) at %s, in memory and without a password: every job in it is lost when the worker exits (for trials; give -redis a redis:// URL to keep jobs)", addr)
}
