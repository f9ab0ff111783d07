package throttle

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/scripts"
)

// slowReplies delays by d the replies of one script (known by its SHA-1):
// they arrive d after the server ran it, as on a slow or busy link.
type slowReplies struct {
	sha string
	d   time.Duration
}

func (h slowReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h slowReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && runsScript(cmd, h.sha) {
			time.Sleep(h.d)
		}
		return err
	}
}

// runsScript reports whether cmd is an EVALSHA or EVAL of the script sha.
func runsScript(cmd redis.Cmder, sha string) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	s, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		return s == sha
	case "eval":
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:]) == sha
	}
	return false
}

// slotsSincePause returns how many intervals of lim the key's bucket has
// been booked past the end of its pause: the slots taken after it.
func slotsSincePause(t *testing.T, th *Throttle, key string, lim Limit) float64 {
	t.Helper()
	k, err := th.rateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := th.client.HMGet(context.Background(), k, "a", "f", "p").Result()
	if err != nil {
		t.Fatal(err)
	}
	c, err := lim.compile()
	if err != nil {
		t.Fatal(err)
	}
	num := func(i int) int64 {
		s, _ := v[i].(string)
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("bucket field %d: %q", i, s)
		}
		return x
	}
	a, f, p := num(0), num(1), num(2)
	return float64((a-p)*c.rl+f) / float64(c.pr)
}

// knowsPause reports whether th has heard of a pause of key.
func knowsPause(th *Throttle, key string) bool {
	e, _ := th.pauses.get(key)
	return e != pauseEnd{}
}

// TestWaitAfterAPauseOnTheInjectedClock: with a test clock (Options.clock), a pause ends
// when that clock passes its end. Once it has, Wait takes the first slot
// at once: it does not book slots and throw them away until the pause
// would have ended in real time.
func TestWaitAfterAPauseOnTheInjectedClock(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, Burst: 5, MaxWait: time.Second, Guard: -1} // the guard would add 50ms to the second slot
		if _, err := th.Pause(ctx, "api", lim, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		clock.Set(30 * time.Second)
		started := time.Now()
		r, err := th.Wait(ctx, "api", lim, 1)
		took := time.Since(started)
		if err != nil || r.Delay != 0 {
			t.Fatalf("Wait after the pause: %v, %v (after %v); want the slot due at once", r, err, took)
		}
		if took >= 30*time.Second {
			t.Fatalf("Wait after the pause took %v: it waited for the pause to end in real time", took)
		}
		if n := slotsSincePause(t, th, "api", lim); n != 5 {
			// The pause leaves Burst-1 intervals booked, so one slot
			// taken puts the bucket Burst intervals past the pause.
			t.Fatalf("the bucket is %v intervals past the pause; want 5 (Burst-1, plus the one slot Wait used)", n)
		}
		next, err := th.Peek(ctx, "api", lim, 1)
		if err != nil || !next.OK || next.Delay != 100*ms {
			t.Fatalf("next slot: %v, %v; want one interval (100ms) later", next, err)
		}
	})
}

// TestPauseVoidsOnlySlotsInsideItOnTheInjectedClock: a slot booked before
// a pause is void if it comes before the pause's end (used now, it would
// fall inside the pause, or crowd the calls that resume at its end) and
// usable if it comes at or after the end, both read on the injected clock.
func TestPauseVoidsOnlySlotsInsideItOnTheInjectedClock(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 20, MaxWait: 5 * time.Second}
		var rs []Reservation
		for range 5 { // slots at 0, 50ms, 100ms, 150ms, 200ms
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK {
				t.Fatalf("reserve: %v, %v", r, err)
			}
			rs = append(rs, r)
		}
		// On the injected clock the pause runs from 100ms to 200ms; in
		// real time it starts as the slots are booked, and would end
		// between the slots at 100ms and 150ms.
		clock.Set(100 * ms)
		if _, err := th.Pause(ctx, "api", lim, 100*ms); err != nil {
			t.Fatal(err)
		}
		checkVoids(t, th, rs, []bool{true, true, true, true, false})
	})
}

// TestFirstSlotAfterAPauseIsUsed: on the Redis server's clock, the first
// slot after a pause starts exactly when the pause ends. The reply to
// Pause arriving later than the reply to the Reserve that books that slot
// (here 60ms later) must not make Wait throw the slot away and book
// another.
func TestFirstSlotAfterAPauseIsUsed(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		client.AddHook(slowReplies{scripts.ThrottlePause.Hash(), 60 * ms})
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: 5 * time.Second}
		if _, err := th.Pause(ctx, "api", lim, 500*ms); err != nil {
			t.Fatal(err)
		}
		if _, err := th.Wait(ctx, "api", lim, 1); err != nil {
			t.Fatal(err)
		}
		checkOneSlotAfterPause(t, th, lim)
	})
}

// TestFirstSlotAfterAnAnnouncedPauseIsUsed: the same, for a process that
// heard of the pause from another one's announcement (which reaches it
// later still), the two hosts' clocks 10s ahead and 10s behind.
func TestFirstSlotAfterAnAnnouncedPauseIsUsed(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		client.AddHook(slowReplies{scripts.ThrottlePause.Hash(), 60 * ms})
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix})
		a.hostNow = func() time.Time { return time.Now().Add(10 * time.Second) }
		b.hostNow = func() time.Time { return time.Now().Add(-10 * time.Second) }
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: 5 * time.Second}
		if _, err := a.Pause(ctx, "api", lim, 500*ms); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); !knowsPause(b, "api"); time.Sleep(ms) {
			if time.Now().After(deadline) {
				t.Fatal("the pause was not announced to the other process")
			}
		}
		if _, err := b.Wait(ctx, "api", lim, 1); err != nil {
			t.Fatal(err)
		}
		checkOneSlotAfterPause(t, b, lim)
	})
}

// TestPauseResumesPacedWithoutGaps: slots booked before a pause, awaited
// after it was announced, are used if they come after its end and booked
// again if not; with new callers of another process, the calls resume at
// the end, one interval apart: no herd (though Burst is 3) and no gap (no
// slot booked and thrown away), though the pause was heard of late.
func TestPauseResumesPacedWithoutGaps(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		client.AddHook(slowReplies{scripts.ThrottlePause.Hash(), 220 * ms})
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix})
		lim := Limit{Rate: 10, Burst: 3, MaxWait: 5 * time.Second, Guard: 50 * ms}
		ctx := context.Background()
		var pre []Reservation
		for range 8 { // three at once (the burst), then 100ms apart to 500ms
			r, err := b.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK {
				t.Fatalf("reserve: %v, %v", r, err)
			}
			pre = append(pre, r)
		}
		// The pause ends between the slots at 400ms and 500ms; its
		// announcement arrives 220ms after the script ran.
		if _, err := a.Pause(ctx, "api", lim, 450*ms); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); !knowsPause(b, "api"); time.Sleep(ms) {
			if time.Now().After(deadline) {
				t.Fatal("the pause was not announced to the other process")
			}
		}
		var (
			mu   sync.Mutex
			used []Reservation
			wg   sync.WaitGroup
		)
		record := func(r Reservation, err error) {
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			used = append(used, r)
			mu.Unlock()
		}
		for _, r := range pre {
			wg.Go(func() {
				ok, err := b.Await(ctx, r)
				if err == nil && !ok {
					r, err = b.Wait(ctx, "api", lim, 1)
				}
				record(r, err)
			})
		}
		for range 4 {
			wg.Go(func() { record(a.Wait(ctx, "api", lim, 1)) })
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		k, _ := a.rateKey("api")
		p, err := client.HGet(ctx, k, "p").Int64()
		if err != nil {
			t.Fatal(err)
		}
		// Each slot's place in the bucket, in 1/rl µs after the pause's
		// end; one interval is pr of them.
		c, _ := lim.compile()
		var places []int64
		for _, r := range used {
			places = append(places, (r.tats[0].a-p)*c.rl+r.tats[0].f-c.burst*c.pr)
		}
		slices.Sort(places)
		if len(places) != 12 {
			t.Fatalf("%d calls went; want 12", len(places))
		}
		if places[0] < 0 || places[0] >= c.pr {
			t.Fatalf("the first call after the pause went %.1fµs after its end; want within one interval", float64(places[0])/float64(c.rl))
		}
		for i := 1; i < len(places); i++ {
			if gap := places[i] - places[i-1]; gap != c.pr {
				t.Fatalf("calls %d and %d are %.1fµs apart; want one interval, %vµs (places %v)", i-1, i, float64(gap)/float64(c.rl), c.pr/c.rl, places)
			}
		}
	})
}

// TestAnnouncementForms: announcements carry the pause's length and its
// end on the scripts' clock; anything else is ignored.
func TestAnnouncementForms(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		payload string
		ok      bool
		key     string
		want    pauseEnd
	}{
		{"250000/1700000000250000 api", true, "api", pauseEnd{at: 1700000000250000, expires: now.Add(250 * ms)}},
		{"250000/1700000000250000 a b", true, "a b", pauseEnd{at: 1700000000250000, expires: now.Add(250 * ms)}},
		{"250000 api", false, "", pauseEnd{}},
		{"250000", false, "", pauseEnd{}},
		{"250000/1700000000250000 ", false, "", pauseEnd{}},
		{"0 api", false, "", pauseEnd{}},
		{"-5/1700000000250000 api", false, "", pauseEnd{}},
		{"x api", false, "", pauseEnd{}},
		{"250000/x api", false, "", pauseEnd{}},
		{"250000/0 api", false, "", pauseEnd{}},
	} {
		key, e, ok := parseAnnouncement(c.payload, now)
		if ok != c.ok || key != c.key || e != c.want {
			t.Errorf("%q: %q %+v %v; want %q %+v %v", c.payload, key, e, ok, c.key, c.want, c.ok)
		}
	}
}

// checkVoids checks whether each of rs is void under the pause of "api"
// on th's pause board, as Await reads it. (Await would also give up a
// slot it woke too late for, which a loaded machine makes likely and
// which these tests do not pin: TestLateSlotLeftAsAGap does.) Await must
// give up the first void slot.
func checkVoids(t *testing.T, th *Throttle, rs []Reservation, void []bool) {
	t.Helper()
	e, _ := th.pauses.get("api")
	if e == (pauseEnd{}) {
		t.Fatal("the pause is not on this process's board")
	}
	for i, want := range void {
		due := rs[i].booked.Add(rs[i].Delay)
		if got := e.voids(rs[i], due, due); got != want {
			t.Fatalf("slot %d (at %v): void = %v; want %v", i, rs[i].Delay, got, want)
		}
		if want {
			if ok, err := th.Await(context.Background(), rs[i]); ok || err != nil {
				t.Fatalf("Await of slot %d, inside the pause = %v, %v; want false", i, ok, err)
			}
		}
	}
}

// checkOneSlotAfterPause: Wait, called during a pause of "api", used the
// first slot after it and booked no other. A wake too late for a slot
// (counted as "late"; a loaded machine makes that likely and
// TestLateSlotLeftAsAGap pins it) books one more each, and is allowed.
func checkOneSlotAfterPause(t *testing.T, th *Throttle, lim Limit) {
	t.Helper()
	late := testutil.ToFloat64(th.metrics.reservations.WithLabelValues(cmp.Or(lim.Name, "default"), "late"))
	if n := slotsSincePause(t, th, "api", lim); n != 1+late {
		t.Fatalf("Wait booked %v slots after the pause, %v of them after a late wake; want 1 and one per late wake", n, late)
	}
}
