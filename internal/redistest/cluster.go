package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds the forming of a cluster, and WaitHealthy.
const clusterTimeout = 20 * time.Second

// slotRanges are the slots of the three masters, in node order.
var slotRanges = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// Cluster is a Redis Cluster of three masters and no replicas, each a
// redis-server on 127.0.0.1, that together serve all 16384 slots: Node(0)
// serves 0-5460, Node(1) 5461-10922 and Node(2) 10923-16383. The nodes have
// no password and no persistence; their nodes.conf keeps their identity and
// slots across Restart.
type Cluster struct {
	nodes  []*Server
	probes []string // one key per node, in that node's slots
}

// StartCluster starts a dedicated three-master cluster for tb (skipping tb
// as Require does when there is no redis-server) and registers a
// tb.Cleanup that kills it. It returns once every node reports
// cluster_state:ok and knows the three masters, and a ClusterClient has
// written and read a key on each node. Failures are fatal to tb. It takes
// a little over 2 s (each new master waits 2 s before it serves), so tests
// that need no cluster of their own use SharedCluster.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	Require(tb)
	dirs := []string{tb.TempDir(), tb.TempDir(), tb.TempDir()}
	c, err := newCluster(dirs)
	if err != nil {
		tb.Fatalf("%v", err)
		return nil
	}
	tb.Cleanup(c.kill)
	return c
}

// newCluster starts three cluster-enabled servers, one per directory, and
// makes them a cluster. On error nothing is left running.
func newCluster(dirs []string) (*Cluster, error) {
	// Each fresh master stays in cluster_state:fail for 2 s after it
	// starts (redis-server's writable delay), so the nodes start together.
	c := &Cluster{nodes: make([]*Server, len(dirs))}
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { c.nodes[i], errs[i] = launch(Config{}, dir, true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.kill()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// kill kills every node and releases their ports.
func (c *Cluster) kill() {
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		_ = n.Kill()
		release(n.port, true)
	}
}

// Addrs returns the addresses of the three masters, in node order.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.Addr()
	}
	return a
}

// Node returns master i (0, 1 or 2), e.g. to Kill or Restart it. It
// panics when i is out of range.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Options returns new cluster client options for the cluster: the
// masters' addresses. Callers may change them before
// redis.NewClusterClient.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new cluster client, closed when tb's test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(c.Options())
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitHealthy waits, for at most 20 s, until the cluster is whole again
// (e.g. after Node(i).Restart): every node reports cluster_state:ok and
// sees the three masters connected, and a cluster client can write and
// read a key on each node. A restarted master reports ok only about 2 s
// after it starts (redis-server's rejoin delay). Failures are fatal to tb.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		tb.Fatalf("%v", err)
	}
}

// form assigns the slots, introduces the nodes to each other and waits
// until the cluster is healthy.
func (c *Cluster) form(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(probeOptions(n.Addr(), ""))
		defer clients[i].Close()
	}
	for i, cl := range clients {
		lo, hi := slotRanges[i][0], slotRanges[i][1]
		err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
			// Before Redis 7.0: list the slots one by one.
			args := []any{"CLUSTER", "ADDSLOTS"}
			for slot := lo; slot <= hi; slot++ {
				args = append(args, slot)
			}
			err = cl.Do(ctx, args...).Err()
		}
		if err != nil {
			return fmt.Errorf("redistest: assigning slots %d-%d to %s: %w", lo, hi, c.nodes[i].Addr(), err)
		}
	}
	// Every pair meets directly: waiting for the nodes to discover each
	// other through gossip takes seconds longer.
	for i, cl := range clients {
		for _, n := range c.nodes[i+1:] {
			if err := cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.port)).Err(); err != nil {
				return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", n.Addr(), c.nodes[i].Addr(), err)
			}
		}
	}
	if err := c.findProbes(ctx, clients[0]); err != nil {
		return err
	}
	return c.waitHealthy(ctx)
}

// findProbes picks, for each node, a key that hashes into its slots (the
// server computes the slot: CLUSTER KEYSLOT).
func (c *Cluster) findProbes(ctx context.Context, cl *redis.Client) error {
	c.probes = make([]string, len(c.nodes))
	missing := len(c.nodes)
	for i := 0; missing > 0; i++ {
		if i == 1000 {
			return errors.New("redistest: found no probe key for some node in 1000 tries")
		}
		key := fmt.Sprintf("redistest:probe:%d", i)
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER KEYSLOT: %w", err)
		}
		for n, r := range slotRanges {
			if int(slot) >= r[0] && int(slot) <= r[1] && c.probes[n] == "" {
				c.probes[n] = key
				missing--
			}
		}
	}
	return nil
}

// waitHealthy polls until every node is healthy (nodeHealth) and a cluster
// client writes and reads each probe key on the node that owns it, or ctx
// ends.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	var last error
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		last = c.checkHealth(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster %v not healthy within %v: %w", c.Addrs(), clusterTimeout, last)
		case <-time.After(wait):
		}
	}
}

// checkHealth returns nil when the cluster is healthy, or what is not. Its
// clients are new each time (see probeOptions).
func (c *Cluster) checkHealth(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		if err := listening(n.Addr()); err != nil {
			return fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		clients[i] = redis.NewClient(probeOptions(n.Addr(), ""))
		defer clients[i].Close()
	}
	for i, cl := range clients {
		if err := nodeHealth(ctx, cl, len(c.nodes)); err != nil {
			return fmt.Errorf("node %s: %w", c.nodes[i].Addr(), err)
		}
	}
	po := probeOptions("", "")
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		Protocol:                 po.Protocol,
		DialTimeout:              po.DialTimeout,
		DialerRetries:            po.DialerRetries,
		ReadTimeout:              po.ReadTimeout,
		WriteTimeout:             po.WriteTimeout,
		DisableIdentity:          true,
		MaintNotificationsConfig: po.MaintNotificationsConfig,
	})
	defer cc.Close()
	for i, key := range c.probes {
		if err := probe(ctx, cc, clients[i], key); err != nil {
			return fmt.Errorf("routing to %s: %w", c.nodes[i].Addr(), err)
		}
	}
	return nil
}

// nodeHealth checks one node's view: cluster_state:ok, every slot served,
// and masters known nodes, all of them connected masters.
func nodeHealth(ctx context.Context, cl *redis.Client, masters int) error {
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	want := [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", "16384"},
		{"cluster_slots_ok", "16384"},
		{"cluster_known_nodes", strconv.Itoa(masters)},
		{"cluster_size", strconv.Itoa(masters)},
	}
	for _, kv := range want {
		if got := infoField(info, kv[0]); got != kv[1] {
			return fmt.Errorf("CLUSTER INFO %s:%s, want %s", kv[0], got, kv[1])
		}
	}
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	ok := 0
	for line := range strings.Lines(nodes) {
		// <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slots>...
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		healthy := f[7] == "connected"
		for _, fl := range flags {
			switch fl {
			case "fail", "fail?", "handshake", "noaddr":
				healthy = false
			}
		}
		if healthy && slices.Contains(flags, "master") {
			ok++
		}
	}
	if ok != masters {
		return fmt.Errorf("CLUSTER NODES shows %d connected masters, want %d:\n%s", ok, masters, strings.TrimSpace(nodes))
	}
	return nil
}

// probe writes key through the cluster client, reads it back, checks that
// node (the owner of its slot) holds it, and deletes it.
func probe(ctx context.Context, cc *redis.ClusterClient, node *redis.Client, key string) error {
	if err := cc.Set(ctx, key, "ok", time.Minute).Err(); err != nil {
		return err
	}
	defer cc.Del(ctx, key)
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "ok" {
		return fmt.Errorf("GET %s: %q, %v", key, v, err)
	}
	n, err := node.Exists(ctx, key).Result()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s was written elsewhere than on its slot's node", key)
	}
	return nil
}
