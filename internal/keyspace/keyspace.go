// Package keyspace builds the Redis key names that sluice uses: each
// limited thing (a tenant, a downstream) gets one Redis Cluster hash tag,
// so that its keys share a slot. The tag encodes the id, which is user
// input, injectively, without braces and in bounded size: "=" and the id
// itself for at most MaxVerbatim bytes of [A-Za-z0-9_.-], else "#" and the
// hex SHA-256 of the id (docs/algorithms.md, "Keys").
package keyspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/sluicehq/sluice/internal/names"
)

// MaxVerbatim is the longest identifier kept as it is in a key name; longer
// ones are hashed so that key names stay small.
const MaxVerbatim = 64

// ErrEmptyID is returned for an empty identifier: an empty hash tag would
// make Redis Cluster hash each key by its full name, scattering one
// tenant's keys over several slots.
var ErrEmptyID = errors.New("sluice: identifier must not be empty")

// Encode returns the tag body for id (without the braces).
func Encode(id string) (string, error) {
	if id == "" {
		return "", ErrEmptyID
	}
	if names.Valid(id, MaxVerbatim, "") {
		return "=" + id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + hex.EncodeToString(sum[:]), nil
}

// Key returns prefix + ":" + kind + ":{" + Encode(id) + "}", the name of
// the key of the given kind that belongs to id. Keys built from the same id
// share one hash slot whatever prefix and kind they have.
func Key(prefix, kind, id string) (string, error) {
	enc, err := Encode(id)
	if err != nil {
		return "", err
	}
	return prefix + ":" + kind + ":{" + enc + "}", nil
}

// Slots is how many hash slots a Redis Cluster has.
const Slots = 16384

// Slot returns the hash slot of a key whose hash tag is tag (the whole
// key when it has none): CRC-16/XMODEM (polynomial 0x1021, initial 0)
// modulo Slots, as Redis Cluster hashes keys.
func Slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}

// FirstInSlots returns name(n) for the smallest n >= 0 whose slot (Slot)
// is in [lo, hi): a name placed in a given share of a cluster's slots. The
// range must hold at least one slot.
func FirstInSlots(lo, hi int, name func(n int) string) string {
	for n := 0; ; n++ {
		try := name(n)
		if slot := Slot(try); slot >= lo && slot < hi {
			return try
		}
	}
}
