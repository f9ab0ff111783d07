package workercmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisconn"
)

// connect returns a client for the configured Redis (a -redis-ca alone is
// Client's error), or starts an embedded one (miniredis on a loopback
// port) when none is configured. The closer stops what was started.
func connect(ctx context.Context, f redisconn.Flags, log io.Writer) (redis.UniversalClient, func(), error) {
	if f.Configured() || f.CAFile != "" {
		c, err := f.Client()
		if err != nil {
			return nil, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("connecting to Redis: %w", err)
		}
		return c, func() { c.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	fmt.Fprintf(log, "sluice: no Redis configured (-redis, SLUICE_REDIS_URL): started an embedded Redis (miniredis) at %s; its data is lost when the worker exits\n", m.Addr())
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { c.Close(); m.Close() }, nil
}
