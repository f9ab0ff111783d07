package redisconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Memory is what one Redis server (one master of a cluster) says about
// its memory in INFO memory.
type Memory struct {
	// Addr is the server's address as the client knows it.
	Addr string
	// Known is false when the server's INFO memory has no maxmemory
	// fields (miniredis, or an INFO that an ACL or a managed service
	// refuses); the other fields are then zero and Why says why.
	Known bool
	Why   string
	// Used is used_memory, Max is maxmemory (0: no limit), Policy is
	// maxmemory_policy, all in bytes.
	Used, Max int64
	Policy    string
}

// Evicts reports whether the server may evict keys: it has a maxmemory
// and a maxmemory-policy other than noeviction. The volatile-* policies
// count: sluice's throttle and admission keys carry TTLs, and evicting
// one lets a downstream or a tenant past its quota.
func (m Memory) Evicts() bool {
	return m.Known && m.Max > 0 && m.Policy != "noeviction"
}

// EvictionProblem describes an evicting server for a log line or an
// error: the policy, its limit, and what eviction costs a queue.
func (m Memory) EvictionProblem() string {
	return fmt.Sprintf("Redis at %s has maxmemory-policy %s with maxmemory %s: when full it deletes keys, and a deleted key is a lost job, a drifting queue counter or a broken quota",
		m.Addr, m.Policy, Bytes(m.Max))
}

// Bytes formats n bytes for people: "12.0 MiB (12582912 bytes)".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadMemory returns INFO memory of client's server, or of every master
// of a cluster (one command each). A reply that is a Redis error (an
// unknown section, NOPERM) gives a Memory that is not Known; an error
// reaching a server is returned.
func ReadMemory(ctx context.Context, client redis.UniversalClient) ([]Memory, error) {
	read := func(ctx context.Context, c *redis.Client) (Memory, error) {
		m := Memory{Addr: c.Options().Addr}
		text, err := c.Info(ctx, "memory").Result()
		var re redis.Error
		if errors.As(err, &re) {
			m.Why = "INFO memory: " + re.Error()
			return m, nil
		}
		if err != nil {
			return m, err
		}
		parseInfo(&m, text)
		return m, nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []Memory
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			m, err := read(ctx, c)
			if err != nil {
				return fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
			mu.Lock()
			out = append(out, m)
			mu.Unlock()
			return nil
		})
		return out, err
	}
	if c, ok := client.(*redis.Client); ok {
		m, err := read(ctx, c)
		if err != nil {
			return nil, err
		}
		return []Memory{m}, nil
	}
	return nil, fmt.Errorf("sluice: reading Redis's memory: unsupported client %T", client)
}

// parseInfo fills m from the text of INFO memory.
func parseInfo(m *Memory, text string) {
	var haveUsed, haveMax, havePolicy bool
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			m.Used, _ = strconv.ParseInt(v, 10, 64)
			haveUsed = true
		case "maxmemory":
			m.Max, _ = strconv.ParseInt(v, 10, 64)
			haveMax = true
		case "maxmemory_policy":
			m.Policy, havePolicy = v, true
		}
	}
	m.Known = haveUsed && haveMax && havePolicy
	if !m.Known {
		m.Used, m.Max, m.Policy = 0, 0, ""
		m.Why = "INFO memory has no used_memory, maxmemory and maxmemory_policy"
	}
}
