package workercmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// connect returns a client for the configured Redis, or starts an embedded
// one (miniredis on a loopback port) when none is configured. The closer
// stops what was started.
func connect(ctx context.Context, url, cluster string, log io.Writer) (redis.UniversalClient, func(), error) {
	switch {
	case cluster != "":
		var addrs []string
		for _, a := range strings.Split(cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		opts := &redis.ClusterOptions{Addrs: addrs}
		if url != "" { // credentials and TLS from the URL, addresses from the list
			o, err := redis.ParseURL(url)
			if err != nil {
				return nil, nil, fmt.Errorf("-redis: %w", err)
			}
			opts.Username, opts.Password, opts.TLSConfig = o.Username, o.Password, o.TLSConfig
		}
		c := redis.NewClusterClient(opts)
		return c, func() { c.Close() }, ping(ctx, c)
	case url != "":
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis: %w (want redis://[user:password@]host:port/db or rediss:// for TLS)", err)
		}
		c := redis.NewClient(o)
		return c, func() { c.Close() }, ping(ctx, c)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	fmt.Fprintf(log, "sluice: no Redis configured (-redis, SLUICE_REDIS_URL): started an embedded Redis (miniredis) at %s; its data is lost when the worker exits\n", m.Addr())
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { c.Close(); m.Close() }, nil
}

func ping(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connecting to Redis: %w", err)
	}
	return nil
}
