package queue

import (
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/scripts"
)

// DefaultPrefix starts every key of the waiting room.
const DefaultPrefix = "sluice:q"

// keys are the waiting room's key names for one queue. All carry the
// queue's hash tag, so that one script can touch them together on Redis
// Cluster.
type keys struct {
	meta, tdepth, cdepth, ring, members, weights, turns, sleep, handed, envelopes, ids string
	tenantPrefix, admPrefix                                                            string
}

func newKeys(prefix, queue string) (keys, error) {
	k := func(kind string) string {
		s, _ := keyspace.Key(prefix, kind, queue)
		return s
	}
	if _, err := keyspace.Encode(queue); err != nil {
		return keys{}, err
	}
	return keys{
		meta:         k("meta"),
		tdepth:       k("tdepth"),
		cdepth:       k("cdepth"),
		ring:         k("ring"),
		members:      k("members"),
		weights:      k("weights"),
		turns:        k("turns"),
		sleep:        k("sleep"),
		handed:       k("handed"),
		envelopes:    k("envelopes"),
		ids:          k("ids"),
		tenantPrefix: k("t") + ":",
		admPrefix:    k("adm") + ":",
	}, nil
}

// tenant returns the encoded tenant and the key of its list.
func (k keys) tenant(id string) (enc, list string, err error) {
	enc, err = keyspace.Encode(id)
	if err != nil {
		return "", "", err
	}
	return enc, k.tenantPrefix + enc, nil
}

// admission returns the key of a tenant's admission state under alg:
// admPrefix + alg + (":" + the state format's version, when it has one) +
// ":" + enc, so that a key in an earlier format is never read as the
// current one (see scripts.StateVersion).
func (k keys) admission(alg, enc string) string {
	if v := scripts.StateVersion[alg]; v != "" {
		return k.admPrefix + alg + ":" + v + ":" + enc
	}
	return k.admPrefix + alg + ":" + enc
}
