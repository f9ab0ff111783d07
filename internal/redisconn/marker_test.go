package redisconn

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestMarkersSeeARestartWithoutPersistence: a redis-server without
// persistence restarted loses the marker; Check reports it once, with
// the value it had, and re-creates it. A second Markers on the same
// Redis (another worker) reports the same loss.
func TestMarkersSeeARestartWithoutPersistence(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	ctx := context.Background()
	a, created, err := NewMarkers(ctx, client)
	if err != nil || len(created) != 1 {
		t.Fatalf("first NewMarkers: created %v, %v; want one marker written", created, err)
	}
	b, created, err := NewMarkers(ctx, client)
	if err != nil || len(created) != 0 {
		t.Fatalf("second NewMarkers: created %v, %v; want none", created, err)
	}
	for _, m := range []*Markers{a, b} {
		if lost, err := m.Check(ctx); err != nil || len(lost) != 0 {
			t.Fatalf("Check before the restart: %v, %v", lost, err)
		}
	}
	was := client.Get(ctx, MarkerPrefix+"{0}").Val()
	srv.Restart(t)
	lost, err := a.Check(ctx)
	if err != nil || len(lost) != 1 || !lost[0].Vanished || lost[0].Was != was || lost[0].Now == "" || lost[0].Addr != srv.Addr() {
		t.Fatalf("Check after the restart: %+v, %v; want the marker %q reported vanished", lost, err, was)
	}
	// b finds a's new marker: a loss too, not vanished.
	if lost, err := b.Check(ctx); err != nil || len(lost) != 1 || lost[0].Vanished || lost[0].Now != client.Get(ctx, MarkerPrefix+"{0}").Val() {
		t.Fatalf("the other worker's Check: %+v, %v", lost, err)
	}
	for _, m := range []*Markers{a, b} {
		if lost, err := m.Check(ctx); err != nil || len(lost) != 0 {
			t.Fatalf("Check once reported: %v, %v; want nothing more", lost, err)
		}
	}
	// A flush is a loss too.
	client.FlushAll(ctx)
	if lost, _ := a.Check(ctx); len(lost) != 1 {
		t.Fatalf("after FLUSHALL: %+v", lost)
	}
}

// TestMarkersPerClusterMaster: one marker on each of the three masters;
// a master restarted without persistence loses its own, and only that one
// is reported.
func TestMarkersPerClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	client := cl.Client(t)
	ctx := context.Background()
	m, created, err := NewMarkers(ctx, client)
	if err != nil || len(created) != 3 {
		t.Fatalf("NewMarkers: created %v, %v; want 3", created, err)
	}
	seen := map[string]bool{}
	for _, k := range m.keys {
		node, err := client.MasterForKey(ctx, k.key)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr != k.addr || seen[k.addr] {
			t.Errorf("marker %s: on %s, placed for %s", k.key, node.Options().Addr, k.addr)
		}
		seen[k.addr] = true
	}
	cl.Node(1).Restart(t)
	cl.WaitHealthy(t)
	lost, err := m.Check(ctx)
	if err != nil || len(lost) != 1 || lost[0].Addr != cl.Node(1).Addr() || !lost[0].Vanished {
		t.Fatalf("Check: %+v, %v; want node 1's marker only", lost, err)
	}
}

// TestSlot: the cluster's key hash (keyspace.Slot), against Redis's
// CLUSTER KEYSLOT.
func TestSlot(t *testing.T) {
	client := redistest.SharedCluster(t)
	for _, tag := range []string{"0", "1", "17", "abc", "sluice", "scale:3"} {
		want := client.ClusterKeySlot(context.Background(), MarkerPrefix+"{"+tag+"}").Val()
		if got := int64(keyspace.Slot(tag)); got != want {
			t.Errorf("tag %q: slot %d, Redis says %d", tag, got, want)
		}
	}
}

// TestReadMemory: INFO memory of a real Redis, and of miniredis (which
// has no such section: not Known, with the reason).
func TestReadMemory(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", "32mb", "--maxmemory-policy", "volatile-lru"}})
	mems, err := ReadMemory(context.Background(), srv.Client(t))
	if err != nil || len(mems) != 1 {
		t.Fatalf("%v, %v", mems, err)
	}
	m := mems[0]
	if !m.Known || m.Max != 32<<20 || m.Policy != "volatile-lru" || m.Used <= 0 || !m.Evicts() || m.Addr != srv.Addr() {
		t.Errorf("%+v", m)
	}
	if !strings.Contains(m.EvictionProblem(), "volatile-lru") {
		t.Errorf("%s", m.EvictionProblem())
	}
	mems, err = ReadMemory(context.Background(), redistest.Mini(t))
	if err != nil || len(mems) != 1 || mems[0].Known || mems[0].Evicts() || mems[0].Why == "" {
		t.Errorf("miniredis: %+v, %v", mems, err)
	}
}

// TestHeadroom: the room left to the workers is the share of maxmemory,
// and at least 2 MiB, or half of a maxmemory below 4 MiB.
func TestHeadroom(t *testing.T) {
	for _, c := range []struct {
		maxmemory int64
		share     float64
		want      int64
	}{
		{1 << 30, 0.10, 107374182},
		{100 << 20, 0.10, 10485760},
		{8 << 20, 0.10, 2 << 20},
		{3 << 20, 0.10, 3 << 19},
		{8 << 20, 0.5, 4 << 20},
	} {
		if got := Headroom(c.maxmemory, c.share); got != c.want {
			t.Errorf("Headroom(%d, %v) = %d; want %d", c.maxmemory, c.share, got, c.want)
		}
	}
}

// TestWatchRefuseRatio: sluice_redis_memory_refuse_ratio is where the
// producers refuse on the master the watch read: a tenth below 1 on a
// large maxmemory, 2 MiB below it on a small one.
func TestWatchRefuseRatio(t *testing.T) {
	for _, c := range []struct {
		maxmemory string
		want      float64
	}{{"1gb", 0.9}, {"8mb", 0.75}} {
		srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", c.maxmemory, "--maxmemory-policy", "noeviction"}})
		w, err := NewWatch(srv.Client(t), time.Second, 0.10, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		w.check(context.Background())
		if got := testutil.ToFloat64(w.refusing); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("maxmemory %s: refuse ratio %v; want %v", c.maxmemory, got, c.want)
		}
	}
}
