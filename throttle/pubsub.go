package throttle

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// pauseChannel is the pub/sub channel on which pauses are announced.
func (t *Throttle) pauseChannel() string { return t.prefix + ":pauses" }

// publish announces to other processes a pause of key that runs for d
// more and ends at end (µs on the scripts' clock), as "d/end key", d in µs.
// Best effort: the pause itself is already in Redis.
func (t *Throttle) publish(ctx context.Context, key string, d time.Duration, end int64) {
	msg := strconv.FormatInt(int64(d/time.Microsecond), 10) + "/" + strconv.FormatInt(end, 10) + " " + key
	if err := t.client.Publish(ctx, t.pauseChannel(), msg).Err(); err != nil {
		t.log.Debug("sluice: announcing a pause failed", "err", err)
	}
}

// subscribe listens for pauses and lease releases announced by other
// processes until Close.
func (t *Throttle) subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	sub := t.client.Subscribe(ctx, t.pauseChannel(), t.releaseChannel())
	// Wait for the confirmation, so that pauses announced after New
	// returns are heard; the subscription reconnects by itself.
	// Until it is confirmed, this process wakes its own waiters itself
	// (Release) and asks again for a lease every 100 ms (WaitAcquire).
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := sub.Receive(wctx); err != nil {
		t.log.Warn("sluice: subscribing to pause announcements", "err", err)
		t.leasePoll = 100 * time.Millisecond
	} else {
		t.subscribed = true
	}
	wcancel()
	done := make(chan struct{})
	t.stop = func() {
		cancel()
		sub.Close()
		<-done
	}
	go func() {
		defer close(done)
		for msg := range sub.Channel() {
			if msg.Channel == t.releaseChannel() {
				t.releases.notify(msg.Payload)
				continue
			}
			if key, e, ok := parseAnnouncement(msg.Payload, t.hostNow()); ok {
				t.pauses.set(key, e, t.hostNow())
			}
		}
	}()
}

// parseAnnouncement reads a message of publish, heard at now on the host's
// clock.
func parseAnnouncement(payload string, now time.Time) (string, pauseEnd, bool) {
	head, key, ok := strings.Cut(payload, " ")
	if !ok || key == "" {
		return "", pauseEnd{}, false
	}
	us, at, ok := strings.Cut(head, "/")
	n, err1 := strconv.ParseInt(us, 10, 64)
	end, err2 := strconv.ParseInt(at, 10, 64)
	if !ok || err1 != nil || err2 != nil || n <= 0 || end <= 0 {
		return "", pauseEnd{}, false
	}
	return key, pauseEnd{at: end, expires: now.Add(time.Duration(n) * time.Microsecond)}, true
}
