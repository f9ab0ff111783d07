// Package keyspace builds the Redis key names that sluice uses.
//
// Every limited thing (a tenant, a downstream) gets exactly one Redis
// Cluster hash tag, so that all keys that belong to it hash to one slot and
// one Lua script may touch them together. Identifiers are user input: they
// may hold braces, colons, spaces, newlines, any bytes and any length. The
// encoding used inside the tag is therefore injective (two different ids
// never share a tag) and bounded in size:
//
//   - an id of at most MaxVerbatim bytes drawn only from [A-Za-z0-9_.-] is
//     used as it is, prefixed with "=";
//   - any other id is replaced by "#" and the hex SHA-256 of its bytes.
//
// The two forms start with different characters, so a verbatim id can never
// equal a hashed one; a hashed collision would need a SHA-256 collision.
// Neither form contains "{" or "}", so the tag always ends where sluice
// meant it to.
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
