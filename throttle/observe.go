package throttle

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/scripts"
)

// Level is what a downstream reported left of one of a key's buckets:
// Observe's argument.
type Level struct {
	// Bucket is 0 for the Limit's own bucket, i+1 for Limit.Also[i].
	Bucket int
	// Left is the units the API said were left in the quota that bucket
	// follows, less any headroom the caller keeps for the quota's other
	// clients. Negative reads as 0.
	Left int64
}

// Observe makes key's buckets follow what the API reports: each bucket a
// Level names is moved, in one atomic script, so that it holds no more
// than Left units (its TAT at least Burst-Left intervals ahead); the next
// call of more than Left units waits for the rest at the bucket's own
// rate. A bucket that holds less already is left alone: the throttle
// takes the API's word for less than it believes, never for more, so it
// never assumes more capacity than the API last reported. A quota shared
// with other clients (the app's own calls on the same key) then draws no
// storm of refusals: what they took is gone from sluice's bucket too.
//
// Left at or above the bucket's burst moves nothing and costs no call to
// Redis, so a Limit of Burst 1 is moved only when the API reports 0.
// It returns how many buckets moved. On Redis only: with Redis
// unreachable it returns an error wrapping ErrUnavailable and the local
// fallback's buckets stay as they are.
func (t *Throttle) Observe(ctx context.Context, key string, lim Limit, levels ...Level) (int, error) {
	c, err := lim.compile()
	if err != nil {
		return 0, err
	}
	k, err := t.rateKey(key)
	if err != nil {
		return 0, err
	}
	buckets := append([]bucket{c.bucket}, c.also...)
	args := []any{t.now()}
	for _, l := range levels {
		if l.Bucket < 0 || l.Bucket >= len(buckets) {
			return 0, fmt.Errorf("%w: Level.Bucket %d of a Limit with %d buckets", algorithms.ErrInvalidPolicy, l.Bucket, len(buckets))
		}
		b := buckets[l.Bucket]
		if l.Left >= b.burst {
			continue
		}
		args = append(args, l.Bucket, b.rl, b.pr, b.burst, max(l.Left, 0))
	}
	if len(args) == 1 {
		return 0, nil
	}
	n, err := scripts.ThrottleObserve.Run(ctx, t.client, []string{k}, args...).Int()
	if err != nil {
		return 0, callErr("observe", err)
	}
	return n, nil
}
