package throttle

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// pauseChannel is the pub/sub channel on which pauses are announced.
func (t *Throttle) pauseChannel() string { return t.prefix + ":pauses" }

// publish announces a pause of key for d to other processes. Best effort:
// the pause itself is already in Redis, and a process that misses the
// announcement only risks using a slot it booked before the pause.
func (t *Throttle) publish(ctx context.Context, key string, d time.Duration) {
	msg := strconv.FormatInt(int64(d/time.Microsecond), 10) + " " + key
	if err := t.client.Publish(ctx, t.pauseChannel(), msg).Err(); err != nil {
		t.log.Debug("sluice: announcing a pause failed", "err", err)
	}
}

// subscribe listens for pauses announced by other processes until Close.
func (t *Throttle) subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	sub := t.client.Subscribe(ctx, t.pauseChannel())
	// Wait for the confirmation, so that pauses announced after New
	// returns are heard. If Redis is down now, go on: the subscription
	// reconnects by itself.
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := sub.Receive(wctx); err != nil {
		t.log.Warn("sluice: subscribing to pause announcements", "err", err)
	}
	wcancel()
	t.stop = func() {
		cancel()
		sub.Close()
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for msg := range sub.Channel() {
			us, key, ok := strings.Cut(msg.Payload, " ")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(us, 10, 64)
			if err != nil || n <= 0 {
				continue
			}
			t.pauses.set(key, t.hostNow().Add(time.Duration(n)*time.Microsecond))
		}
	}()
}
