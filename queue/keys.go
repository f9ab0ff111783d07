package queue

import "github.com/sluicehq/sluice/internal/keyspace"

// DefaultPrefix starts every key of the waiting room.
const DefaultPrefix = "sluice:q"

// keys are the waiting room's key names for one queue, and the names of
// the asynq keys its scripts write, all with asynq's hash tag {Q}
// (docs/queue.md, Keys).
type keys struct {
	meta, cdepth, ring, members, weights, turns, sleep, why, ids string
	// later holds the jobs not due yet (by due time); ldepth counts them
	// per tenant.
	later, ldepth string
	// full marks throttle keys whose next slot is too far away, until
	// when (sorted set).
	full                    string
	tenantPrefix, admPrefix string
	// asynqPending is asynq's pending list; asynqTask prefixes task ids.
	asynqPending, asynqTask string
}

func newKeys(prefix, queue string) keys {
	tag := ":{" + queue + "}"
	k := func(kind string) string { return prefix + ":" + kind + tag }
	return keys{
		meta:         k("meta"),
		cdepth:       k("cdepth"),
		ring:         k("ring"),
		members:      k("members"),
		weights:      k("weights"),
		turns:        k("turns"),
		sleep:        k("sleep"),
		why:          k("why"),
		ids:          k("ids"),
		later:        k("later"),
		ldepth:       k("ldepth"),
		full:         k("full"),
		tenantPrefix: k("t") + ":",
		admPrefix:    k("adm") + ":",
		asynqPending: "asynq:{" + queue + "}:pending",
		asynqTask:    "asynq:{" + queue + "}:t:",
	}
}

// tenant returns the encoded tenant and the key of its list.
func (k keys) tenant(id string) (enc, list string, err error) {
	enc, err = keyspace.Encode(id)
	if err != nil {
		return "", "", err
	}
	return enc, k.tenantPrefix + enc, nil
}

// admission returns the key of a tenant's admission state under alg.
func (k keys) admission(alg, enc string) string {
	return k.admPrefix + alg + ":" + enc
}
