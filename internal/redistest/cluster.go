package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeKeys hash to a slot of each master in turn: 3300, 7365, 15495.
var probeKeys = [3]string{"redistest:{b}", "redistest:{c}", "redistest:{a}"}

// Cluster is a Redis Cluster of three masters and no replicas, each a
// redis-server on 127.0.0.1, that together serve all 16384 slots: Node(0)
// serves 0-5460, Node(1) 5461-10922 and Node(2) 10923-16383. The nodes have
// no password and no persistence; their nodes.conf keeps their identity and
// slots across Restart.
type Cluster struct {
	nodes [3]*Server
}

// StartCluster starts a dedicated cluster for tb (after Require), killed
// by a tb.Cleanup, and returns once it is healthy (a little over 2 s).
// Failures are fatal to tb.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	Require(tb)
	c, err := newCluster()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(c.remove)
	return c
}

// LaunchCluster starts a cluster outside a test, for commands such as the
// benchmarks under bench/: StartCluster without the test. The caller must
// call stop, which kills the nodes and removes their data.
func LaunchCluster() (c *Cluster, stop func(), err error) {
	if c, err = newCluster(); err != nil {
		return nil, nil, err
	}
	return c, c.remove, nil
}

// newCluster starts three cluster-enabled servers together and makes them
// a cluster. On error nothing is left running.
func newCluster() (*Cluster, error) {
	c := &Cluster{}
	var errs [3]error
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { c.nodes[i], errs[i] = launch(Config{}, true) })
	}
	wg.Wait()
	err := errors.Join(errs[:]...)
	if err == nil {
		err = c.form()
	}
	if err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// remove kills every node and deletes its data.
func (c *Cluster) remove() {
	for _, n := range c.nodes {
		if n != nil {
			_ = n.Kill()
			n.remove()
		}
	}
}

// Addrs returns the addresses of the three masters, in node order.
func (c *Cluster) Addrs() []string {
	return []string{c.nodes[0].Addr(), c.nodes[1].Addr(), c.nodes[2].Addr()}
}

// Node returns master i (0, 1 or 2), e.g. to Kill or Restart it.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Client returns a new cluster client, closed when tb's test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitHealthy waits, for at most 20 s, until the cluster is whole (see
// health), e.g. after Node(i).Restart: a restarted master serves again
// about 2 s later. Failures are fatal to tb.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	if err := c.waitHealthy(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// form has redis-cli, which ships beside redis-server, assign the slots in
// node order and join the nodes, then waits until the cluster is healthy.
func (c *Cluster) form() error {
	bin, err := lookup()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, append(c.Addrs(), "--cluster-yes")...)
	cli := filepath.Join(filepath.Dir(bin), "redis-cli")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}
	return c.waitHealthy()
}

// waitHealthy polls health until it passes, for at most timeout.
func (c *Cluster) waitHealthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		err := c.health(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster %v not healthy within %v: %w", c.Addrs(), timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// health returns nil when every node sees the whole cluster (state ok,
// every slot served, three connected masters and nothing else) and a
// cluster client writes a key on each master; otherwise what is wrong.
func (c *Cluster) health(ctx context.Context) error {
	for _, n := range c.nodes {
		cl := probeClient(n.Addr())
		info, err := cl.ClusterInfo(ctx).Result()
		nodes, err2 := cl.ClusterNodes(ctx).Result()
		cl.Close()
		if err = errors.Join(err, err2); err != nil {
			return fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info+"\r\n", want+"\r\n") {
				return fmt.Errorf("node %s: CLUSTER INFO lacks %s:\n%s", n.Addr(), want, info)
			}
		}
		if strings.Count(nodes, " connected") != 3 || strings.Contains(nodes, "fail") ||
			strings.Contains(nodes, "handshake") || strings.Contains(nodes, "noaddr") {
			return fmt.Errorf("node %s: CLUSTER NODES:\n%s", n.Addr(), nodes)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Protocol: 2, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer cc.Close()
	for i, key := range probeKeys {
		if err := cc.Set(ctx, key, "ok", time.Minute).Err(); err != nil {
			return fmt.Errorf("writing to %s: %w", c.nodes[i].Addr(), err)
		}
		cc.Del(ctx, key)
	}
	return nil
}

// probeClient returns a client for one check: no retries, short timeouts,
// no optional handshake. Each check makes a new one, as a go-redis pool
// whose dial failed keeps answering with that failure for up to a second.
func probeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}
