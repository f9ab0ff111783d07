package redisconn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// MarkerPrefix starts the marker keys: MarkerPrefix+"{tag}".
const MarkerPrefix = "sluice:marker:"

// Markers tells when Redis lost its data. Each master holds a marker key
// with a random value, written once (SET NX) by the first worker to start
// and never expiring; Check reads them and reports the ones that vanished
// (Redis restarted without persistence, was flushed, or evicted them) or
// changed (another Redis behind the address, or another worker already
// re-created a lost one), and re-creates them. On a cluster the markers
// are placed one per master, by hash tag, as the slots were at New.
// Not safe for concurrent use.
type Markers struct {
	client redis.UniversalClient
	keys   []markerKey
}

type markerKey struct {
	key, addr, seen string
}

// Loss is a marker found gone or changed.
type Loss struct {
	Key  string
	Addr string // the master that held it at New
	// Was is the marker's value when last seen ("<random> <RFC 3339
	// time of its creation>"); Now is its value now, after Check
	// re-created it or found another one.
	Was, Now string
	// Vanished is true when the marker was gone, false when it held
	// another value.
	Vanished bool
}

// NewMarkers places the markers (one per master), writes those missing,
// and remembers their values. created reports the markers this call
// wrote: on a Redis the fleet used before, a worker that creates one
// is the first to see that Redis lost its data.
func NewMarkers(ctx context.Context, client redis.UniversalClient) (m *Markers, created []Loss, err error) {
	m = &Markers{client: client}
	if cc, ok := client.(*redis.ClusterClient); ok {
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("reading the cluster's slots: %w", err)
		}
		for _, s := range slots {
			if len(s.Nodes) == 0 {
				continue
			}
			tag := tagInSlots(s.Start, s.End)
			m.keys = append(m.keys, markerKey{key: MarkerPrefix + "{" + tag + "}", addr: s.Nodes[0].Addr})
		}
	} else {
		addr := ""
		if c, ok := client.(*redis.Client); ok {
			addr = c.Options().Addr
		}
		m.keys = []markerKey{{key: MarkerPrefix + "{0}", addr: addr}}
	}
	// One marker per master: a master may serve several slot ranges.
	byAddr := map[string]bool{}
	keys := m.keys[:0]
	for _, k := range m.keys {
		if !byAddr[k.addr] {
			byAddr[k.addr] = true
			keys = append(keys, k)
		}
	}
	m.keys = keys
	for i := range m.keys {
		v, wrote, err := m.ensure(ctx, m.keys[i].key)
		if err != nil {
			return nil, nil, err
		}
		m.keys[i].seen = v
		if wrote {
			created = append(created, Loss{Key: m.keys[i].key, Addr: m.keys[i].addr, Now: v, Vanished: true})
		}
	}
	return m, created, nil
}

// ensure writes a new marker at key unless one is there, and returns the
// value there now and whether this call wrote it.
func (m *Markers) ensure(ctx context.Context, key string) (string, bool, error) {
	b := make([]byte, 12)
	rand.Read(b)
	fresh := hex.EncodeToString(b) + " " + time.Now().UTC().Format(time.RFC3339)
	wrote, err := m.client.SetNX(ctx, key, fresh, 0).Result()
	if err != nil {
		return "", false, fmt.Errorf("writing the marker %s: %w", key, err)
	}
	if wrote {
		return fresh, true, nil
	}
	v, err := m.client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) { // gone again at once: try once more next Check
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the marker %s: %w", key, err)
	}
	return v, false, nil
}

// Check reads every marker (one GET each) and returns those gone or
// changed since last seen, having re-created the ones gone. An error
// reading one (Redis unreachable) ends the check; nothing is reported.
func (m *Markers) Check(ctx context.Context) ([]Loss, error) {
	var lost []Loss
	for i := range m.keys {
		k := &m.keys[i]
		v, err := m.client.Get(ctx, k.key).Result()
		vanished := errors.Is(err, redis.Nil)
		if err != nil && !vanished {
			return lost, fmt.Errorf("reading the marker %s: %w", k.key, err)
		}
		if vanished {
			if v, _, err = m.ensure(ctx, k.key); err != nil {
				return lost, err
			}
		}
		// A marker not seen yet (gone again at once when written) is
		// adopted, not reported.
		if k.seen != "" && (vanished || v != k.seen) {
			lost = append(lost, Loss{Key: k.key, Addr: k.addr, Was: k.seen, Now: v, Vanished: vanished})
		}
		k.seen = v
	}
	return lost, nil
}

// tagInSlots returns a short hash tag whose slot is in [start, end].
func tagInSlots(start, end int) string {
	return keyspace.FirstInSlots(start, end+1, strconv.Itoa)
}
