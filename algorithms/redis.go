package algorithms

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/scripts"
)

// DefaultPrefix starts every key that the Redis limiters write, unless
// RedisOptions.Prefix says otherwise.
const DefaultPrefix = "sluice:rl"

// RedisOptions configures NewRedis. A nil *RedisOptions means defaults.
type RedisOptions struct {
	// Prefix starts every key name; default DefaultPrefix. Limiters of the
	// same algorithm and prefix share each key's state.
	Prefix string

	// clock, when set, replaces the Redis server's clock. Keys written
	// with it live an hour longer than needed. Set by this package's
	// tests.
	clock func() time.Time
}

// Redis is a Limiter whose state lives in Redis, shared by every process
// using the same server or cluster: one atomic Lua script a call, decided
// on the server's clock. Each limited key is one Redis key with its own
// hash tag and a TTL (see Key). Safe for concurrent use.
type Redis struct {
	p      Policy
	c      params
	client redis.Scripter
	script *redis.Script
	kind   string
	prefix string
	clock  func() time.Time
}

// NewRedis returns a limiter for p on client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient), or an
// error wrapping ErrInvalidPolicy that names the wrong field.
func NewRedis(client redis.Scripter, p Policy, opts *RedisOptions) (*Redis, error) {
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("sluice: NewRedis: nil client")
	}
	if opts == nil {
		opts = &RedisOptions{}
	}
	return &Redis{p: p, c: c, client: client, script: scripts.Admit[string(p.Algorithm)], kind: impls[p.Algorithm].kind,
		prefix: cmp.Or(opts.Prefix, DefaultPrefix), clock: opts.clock}, nil
}

// Policy returns the policy r enforces.
func (r *Redis) Policy() Policy { return r.p }

// Key returns the Redis key that holds key's state: Prefix, the short
// algorithm name and key encoded by internal/keyspace as a hash tag, such
// as "sluice:rl:gcra:{=tenant-1}".
func (r *Redis) Key(key string) (string, error) {
	if key == "" {
		return "", ErrInvalidKey
	}
	return keyspace.Key(r.prefix, r.kind, key)
}

// AllowN admits n units for key, or refuses them without consuming.
func (r *Redis) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return r.do(ctx, key, n, true)
}

// PeekN reports what AllowN would decide now, without consuming.
func (r *Redis) PeekN(ctx context.Context, key string, n int64) (Decision, error) {
	return r.do(ctx, key, n, false)
}

// Reset deletes key's state.
func (r *Redis) Reset(ctx context.Context, key string) error {
	k, err := r.Key(key)
	if err != nil {
		return err
	}
	return r.client.Eval(ctx, "return redis.call('DEL', KEYS[1])", []string{k}).Err()
}

func (r *Redis) do(ctx context.Context, key string, n int64, consume bool) (Decision, error) {
	if err := r.c.check(key, n); err != nil {
		return Decision{}, err
	}
	k, err := keyspace.Key(r.prefix, r.kind, key)
	if err != nil {
		return Decision{}, err
	}
	now := ""
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	// go-redis sends an int64 in decimal and a bool as 1 or 0, as the
	// scripts read them.
	args := []any{r.c.limit, r.c.period, r.c.capacity, r.c.rl, r.c.pr, n, consume, now}
	v, err := r.script.Run(ctx, r.client, []string{k}, args...).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("sluice: %s on redis: %w", r.p.Algorithm, err)
	}
	if len(v) != 4 {
		return Decision{}, fmt.Errorf("sluice: %s on redis: unexpected reply of %d values", r.p.Algorithm, len(v))
	}
	return result{allowed: v[0] == 1, remaining: v[1], reset: v[2], retry: v[3]}.decision(r.c.capacity), nil
}
