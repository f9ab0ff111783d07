package queue

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/throttle"
)

// claimTest is a server over 3 shards with a per-tenant downstream "api"
// whose slots the claim books, and a handler that records when each
// tenant's calls start.
type claimTest struct {
	p     *Producer
	s     *Server
	th    *throttle.Throttle
	lim   throttle.Limit
	reg   *prometheus.Registry
	mu    sync.Mutex
	calls map[string][]time.Time
}

// newClaimTest starts the server. With named, its config names the
// downstream (ServerConfig.DownstreamNames); without, a first job teaches
// it the downstream.
func newClaimTest(t *testing.T, client redis.UniversalClient, lim throttle.Limit, named bool) *claimTest {
	t.Helper()
	cfg := testConfig(t, 1000)
	cfg.Shards = 3
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &claimTest{p: p, lim: lim, calls: map[string][]time.Time{}}
	c.reg = prometheus.NewRegistry()
	metrics, err := throttle.NewMetrics(c.reg)
	if err != nil {
		t.Fatal(err)
	}
	c.th = testThrottle(t, client, &throttle.Options{Metrics: metrics})
	ds := func(name string) (Downstream, bool) { return Downstream{Limit: lim, PerTenant: true}, name == "api" }
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		c.mu.Lock()
		c.calls[j.Tenant] = append(c.calls[j.Tenant], time.Now())
		c.mu.Unlock()
		return nil
	})
	scfg := ServerConfig{Config: cfg, Concurrency: 8, Throttle: c.th, Downstreams: ds}
	if named {
		scfg.DownstreamNames = []string{"api", "unknown"}
	}
	c.s = startServer(t, client, scfg, h)
	if !named {
		// The server learns which downstreams the claim books from the
		// jobs it runs: one job first.
		fill(t, p, "first", 1, "api")
		waitFor(t, 30*time.Second, "the first job", func() bool { return c.ran("first") == 1 })
	}
	return c
}

func (c *claimTest) ran(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls[tenant])
}

// reservations returns sluice_throttle_reservations_total{result} of "api".
func (c *claimTest) reservations(t *testing.T, result string) float64 {
	t.Helper()
	return counterValue(t, c.reg, "sluice_throttle_reservations_total", "throttle", "api", "result", result)
}

// TestClaimBooksTenantSlots: on a per-tenant downstream of one rate, the
// claim books each job's slot on its tenant's bucket, in the hash slot of
// the tenant's shard (a cluster refuses a script that reaches across
// slots), and hands it over when it is due: the workers book none of
// their own, and no tenant's calls start earlier than its rate and burst
// allow.
func TestClaimBooksTenantSlots(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		// The calls are timed from the first one's start, which may lag
		// its slot on a busy machine: a guard of half the bucket leaves
		// the paced calls room for that lag, as it does an API's bucket.
		lim := throttle.Limit{Name: "api", Rate: 10, Burst: 3, MaxWait: time.Second, Guard: 150 * time.Millisecond}
		c := newClaimTest(t, client, lim, false)
		tenants := []string{"a", "b", "c", "a tenant with spaces"}
		const each = 6
		for _, tn := range tenants {
			fill(t, c.p, tn, each, "api")
		}
		waitFor(t, 60*time.Second, "every job", func() bool {
			for _, tn := range tenants {
				if c.ran(tn) < each {
					return false
				}
			}
			return true
		})
		// Each job's slot is booked once and used: by the claim, or by its
		// worker for the first job (before the server knew the downstream)
		// and for a claimed slot found too late to use on a busy machine.
		claimed, granted, late := c.reservations(t, "claimed"), c.reservations(t, "granted"), c.reservations(t, "late")
		// A slot found too late is left as a gap and booked again, so each
		// late one may add a booking.
		if want := float64(1 + len(tenants)*each); claimed+granted < want || claimed+granted > want+late || claimed == 0 || granted > 1+late {
			t.Errorf("slots booked by the claim %v, by the workers %v, too late to use %v; want %d in all, the workers' the first and the late ones",
				claimed, granted, late, 1+len(tenants)*each)
		}
		// The k-th call (from 0) of a tenant starts no sooner than k-2
		// intervals after its first: the burst of 3, then the rate.
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, tn := range tenants {
			at := c.calls[tn]
			for k := 3; k < len(at); k++ {
				if gap, least := at[k].Sub(at[0]), time.Duration(k-2)*100*time.Millisecond-2*time.Millisecond; gap < least {
					t.Errorf("tenant %q: call %d started %v after the first; the rate allows %v at the soonest", tn, k, gap, least)
				}
			}
			key, err := c.th.BucketKey(c.s.ThrottleKey("api", tn, true))
			if err != nil {
				t.Fatal(err)
			}
			k, enc, _, _ := c.s.shards.tenant(tn)
			if !strings.Contains(key, "{"+k.queue+"}api/"+enc) {
				t.Errorf("tenant %q's bucket is %q, not in its shard %q's hash slot", tn, key, k.queue)
			}
			if n, err := client.Exists(context.Background(), key).Result(); err != nil || n != 1 {
				t.Errorf("tenant %q's bucket %q: exists %d, %v", tn, key, n, err)
			}
		}
	})
}

// TestDownstreamNamesBookFromTheStart: a server told its downstreams'
// names (ServerConfig.DownstreamNames, as the worker does from its
// policy) has the claim book the slots of the first jobs too; a name the
// server does not know is ignored.
func TestDownstreamNamesBookFromTheStart(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		c := newClaimTest(t, client, throttle.Limit{Name: "api", Rate: 100, MaxWait: time.Second}, true)
		for _, tn := range []string{"a", "b", "c"} {
			fill(t, c.p, tn, 1, "api")
		}
		waitFor(t, 30*time.Second, "every job", func() bool { return c.ran("a")+c.ran("b")+c.ran("c") == 3 })
		if claimed, granted, late := c.reservations(t, "claimed"), c.reservations(t, "granted"), c.reservations(t, "late"); claimed+granted < 3 || claimed+granted > 3+late || granted > late {
			t.Errorf("slots booked by the claim %v, by the workers %v, too late to use %v; want the claim's every one not late", claimed, granted, late)
		}
	})
}

// TestClaimWaitsOutPause: a tenant's key paused (a 429) holds its next job
// in the waiting room, its tenant asleep for the pause and saying so,
// until the pause ends; another tenant's job goes at once.
func TestClaimWaitsOutPause(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		lim := throttle.Limit{Name: "api", Rate: 100, MaxWait: time.Second}
		c := newClaimTest(t, client, lim, true)
		ctx := context.Background()
		start := time.Now()
		const pause = 1500 * time.Millisecond
		if _, err := c.th.Pause(ctx, c.s.ThrottleKey("api", "held", true), lim, pause); err != nil {
			t.Fatal(err)
		}
		fill(t, c.p, "held", 1, "api")
		fill(t, c.p, "free", 1, "api")
		waitFor(t, 30*time.Second, "the free tenant's job, and the held tenant asleep", func() bool {
			ss, err := c.p.Sleepers(ctx, 10)
			return err == nil && c.ran("free") == 1 && len(ss) == 1 && ss[0].Tenant == "held"
		})
		ss, _ := c.p.Sleepers(ctx, 10)
		if len(ss) != 1 || !strings.HasPrefix(ss[0].Why, "pause: downstream api is paused") {
			t.Errorf("sleepers %+v; want the held tenant, asleep for the pause", ss)
		}
		if n := c.ran("held"); n != 0 && time.Since(start) < pause {
			t.Fatalf("the held tenant's job ran during its key's pause")
		}
		waitFor(t, 30*time.Second, "the held tenant's job", func() bool { return c.ran("held") == 1 })
		c.mu.Lock()
		at := c.calls["held"][0]
		c.mu.Unlock()
		if at.Sub(start) < pause-5*time.Millisecond {
			t.Errorf("the held tenant's job started %v after a pause of %v", at.Sub(start), pause)
		}
	})
}

// TestClaimArgsNameTheBucket: the name the claim builds for a tenant's
// bucket (its 9th argument, the shard's prefix, then the downstream's
// name, "/" and the encoded tenant) is the throttle's own, for plain and hashed tenant ids, with
// one shard and several; and only downstreams of one rate per tenant that
// learn nothing and lease nothing are booked by the claim.
func TestClaimArgsNameTheBucket(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	th, err := throttle.New(client, &throttle.Options{Prefix: "p:th"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	lim := throttle.Limit{Name: "api", Rate: 2, Burst: 40}
	for _, shards := range []int{1, 3} {
		s, err := NewServer(client, &ServerConfig{Config: Config{Queue: "shop", Bound: 10, Shards: shards}, Throttle: th,
			Downstreams: func(string) (Downstream, bool) { return Downstream{}, false }})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []struct {
			name string
			d    Downstream
			want bool
		}{
			{"api", Downstream{Limit: lim, PerTenant: true}, true},
			{"shared", Downstream{Limit: lim}, false},
			{"also", Downstream{Limit: throttle.Limit{Rate: 2, Also: []throttle.Rate{{Rate: 100, Per: time.Minute}}}, PerTenant: true}, false},
			{"leased", Downstream{Limit: lim, PerTenant: true, Concurrency: &throttle.Concurrency{Max: 1}}, false},
			// a name so long that a tenant's key would not name its tag
			{strings.Repeat("d", 120), Downstream{Limit: lim, PerTenant: true}, false},
			{"a name with spaces", Downstream{Limit: lim, PerTenant: true}, false},
		} {
			s.books.note(d.d, d.name)
			args := *s.books.args.Load()
			booked := false
			for i := 0; i < len(args); i += 5 {
				booked = booked || args[i] == d.name
			}
			if booked != d.want {
				t.Errorf("%d shards: downstream %q booked by the claim %v, want %v", shards, d.name, booked, d.want)
			}
		}
		for _, tenant := range []string{"acme", "a store/with spaces", strings.Repeat("x", 100)} {
			k, enc, _, err := s.shards.tenant(tenant)
			if err != nil {
				t.Fatal(err)
			}
			prefix, _ := s.claimArgs(s.disp[s.shards.index(k.queue)])[0].(string)
			want, err := th.BucketKey(s.ThrottleKey("api", tenant, true))
			if err != nil {
				t.Fatal(err)
			}
			if got := prefix + "api/" + enc; got != want {
				t.Errorf("%d shards, tenant %.20q: the claim names the bucket %q, the throttle %q", shards, tenant, got, want)
			}
			if !keyspace.Tagged(s.ThrottleKey("api", tenant, true)) {
				t.Errorf("tenant %.20q's key %q names no hash tag", tenant, s.ThrottleKey("api", tenant, true))
			}
		}
	}
}

// TestEnvelopeSlot: a job's envelope opens with its slot field, zero as
// written; 32 digits there are the slot and the delay, and anything else
// is no slot.
func TestEnvelopeSlot(t *testing.T) {
	j := &Job{ID: "j", Tenant: "t", Type: "x", nonce: "n"}
	env, err := j.encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(env, `{"slot":"`+noSlot+`",`) {
		t.Fatalf("envelope %s does not open with an empty slot", env)
	}
	for _, c := range []struct {
		slot        string
		at, delayUs int64
	}{
		{noSlot, 0, 0},
		{"17800000000000000000000000004000", 1780000000000000, 4000},
		{"1780000000000000000000000000400", 0, 0},  // 31 digits
		{"17800000000000000000000000004x00", 0, 0}, // not a number
		{"00000000000000000000000000004000", 0, 0}, // no slot
		{"1780000000000000-000000000004000", 0, 0}, // a sign
	} {
		got, err := decodeJob([]byte(strings.Replace(env, noSlot, c.slot, 1)))
		if err != nil {
			t.Fatalf("slot %q: %v", c.slot, err)
		}
		if got.slot != c.at || (c.at != 0 && got.slotDelay != c.delayUs) {
			t.Errorf("slot %q: read %d, %d; want %d, %d", c.slot, got.slot, got.slotDelay, c.at, c.delayUs)
		}
	}
}

// TestPacedTenantSleepsInItsTurn: a tenant whose next job waits for its
// slot goes to sleep in the claim that took its last due job, its next
// job left first in its list, rather than in a turn of its own. With a
// claim's room of 2 shared by 2 tenants (a job a turn), one claim hands
// over a job of each and puts the paced tenant (1 a second, no burst) to
// sleep until its next slot is within the claim's lead.
func TestPacedTenantSleepsInItsTurn(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		th := testThrottle(t, client, nil)
		d := Downstream{Limit: throttle.Limit{Name: "api", Rate: 1, MaxWait: time.Second}, PerTenant: true}
		s, err := NewServer(client, &ServerConfig{Config: cfg, Throttle: th, Prefetch: 2,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }})
		if err != nil {
			t.Fatal(err)
		}
		s.books.note(d, "api")
		fill(t, p, "paced", 2, "api")
		fill(t, p, "free", 1, "api")
		if _, err := s.dispatchOne(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := p.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := p.Sleepers(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if st.HandedOver != 2 || st.Sleeping != 1 || len(ss) != 1 || ss[0].Tenant != "paced" ||
			!strings.HasPrefix(ss[0].Why, "slot: downstream api's next slot") {
			t.Fatalf("after one claim: %+v, sleepers %+v; want a job of each tenant handed over, and the paced tenant asleep for its slot", st, ss)
		}
		if wait := time.Until(ss[0].Until); wait < 900*time.Millisecond-claimLead || wait > time.Second-claimLead {
			t.Errorf("the paced tenant wakes in %v; its next slot is a second after its first, less the lead", wait)
		}
	})
}
