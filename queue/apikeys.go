package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// APIKey describes one API key of a queue's HTTP enqueue endpoint; the
// secret itself is shown once, by Keys.Add or Keys.Rotate, and never
// stored.
type APIKey struct {
	// ID names the key in List, Revoke and Rotate; it is the part of the
	// key between "slk_" and the secret, and no secret.
	ID string
	// Tenants are the tenants the key enqueues for: one, which a request
	// need not name, or several, of which a request names one.
	Tenants []string
	// Created is when the key was added; Rotated when its secret was last
	// replaced (zero if never).
	Created, Rotated time.Time
}

// Errors of Keys.
var (
	// ErrKeyNotFound: no key has that id (Revoke, Rotate).
	ErrKeyNotFound = errors.New("sluice: no API key with that id")
	// ErrBadKey: a presented key is malformed, unknown or revoked
	// (Authenticate). Which of the three is not said.
	ErrBadKey = errors.New("sluice: the API key is not valid")
)

// keyPrefix starts every API key, so that a key in a log or a
// repository is recognisable (and a scanner can look for it).
const keyPrefix = "slk_"

// keyRecordVersion is the version of a stored key's record; a record of
// another version is refused loudly rather than read wrongly.
const keyRecordVersion = 1

// keyRecord is what Redis holds for a key: a hash of its secret, never
// the secret.
type keyRecord struct {
	V       int      `json:"v"`
	SHA256  string   `json:"sha256"` // hex of SHA-256 of the secret
	Tenants []string `json:"tenants"`
	Created int64    `json:"created"` // Unix seconds
	Rotated int64    `json:"rotated,omitempty"`
}

// Keys are the API keys of a queue's HTTP enqueue endpoint, in one Redis
// hash beside the queue's waiting room (docs/operations.md, Tenant keys).
// Keys are added, listed, revoked and rotated while workers run: every
// request reads its key from Redis, so a revoked or rotated key is
// refused from the next request on, by every worker. Safe for concurrent
// use.
//
// A key is "slk_", a random 64-bit id in hex, "_" and a random 256-bit
// secret (base64url). Redis holds the SHA-256 of the secret, not the
// secret: whoever reads Redis or its backups cannot enqueue. A slow
// password hash (bcrypt, scrypt) is not needed: it makes guessing a
// low-entropy password offline expensive, and a 256-bit random secret
// cannot be guessed at any speed, while bcrypt's tens of milliseconds a
// request would hand a caller with wrong keys the workers' CPU.
type Keys struct {
	client redis.UniversalClient
	hash   string // the Redis hash: id -> keyRecord JSON
	now    func() time.Time
}

// Keys returns the API keys of p's queue, on p's Redis.
func (p *Producer) Keys() *Keys {
	return &Keys{client: p.client, hash: p.cfg.Prefix + ":keys:{" + p.cfg.Queue + "}", now: time.Now}
}

// Add creates a key for tenants (at least one, each a valid tenant id,
// none twice) and returns it with its secret, the whole key to hand to
// the caller: it is not shown again.
func (k *Keys) Add(ctx context.Context, tenants ...string) (APIKey, string, error) {
	if err := checkKeyTenants(tenants); err != nil {
		return APIKey{}, "", err
	}
	id := make([]byte, 8)
	rand.Read(id)
	ak := APIKey{ID: hex.EncodeToString(id), Tenants: slices.Clone(tenants), Created: k.now().Truncate(time.Second)}
	secret, rec := newSecret(ak)
	b, _ := json.Marshal(rec)
	ok, err := k.client.HSetNX(ctx, k.hash, ak.ID, b).Result()
	if err != nil {
		return APIKey{}, "", fmt.Errorf("sluice: adding an API key: %w", err)
	}
	if !ok { // 64 random bits: never, unless the random source is broken
		return APIKey{}, "", errors.New("sluice: adding an API key: its random id is taken; try again")
	}
	return ak, keyPrefix + ak.ID + "_" + secret, nil
}

// newSecret returns a new random secret and the record that stores its
// hash for ak.
func newSecret(ak APIKey) (string, keyRecord) {
	raw := make([]byte, 32)
	rand.Read(raw) // never fails (crypto/rand)
	secret := base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	rec := keyRecord{V: keyRecordVersion, SHA256: hex.EncodeToString(sum[:]), Tenants: ak.Tenants, Created: ak.Created.Unix()}
	if !ak.Rotated.IsZero() {
		rec.Rotated = ak.Rotated.Unix()
	}
	return secret, rec
}

// checkKeyTenants checks the tenants of a new key as Enqueue checks a
// job's tenant.
func checkKeyTenants(tenants []string) error {
	if len(tenants) == 0 {
		return fmt.Errorf("%w: an API key needs at least one tenant", ErrInvalidJob)
	}
	for i, t := range tenants {
		if err := (&Job{Tenant: t, Type: "x"}).validate(DefaultMaxPayload); err != nil {
			return err
		}
		if slices.Contains(tenants[:i], t) {
			return fmt.Errorf("%w: tenant %.64q is given twice", ErrInvalidJob, t)
		}
	}
	return nil
}

// List returns every key, by id.
func (k *Keys) List(ctx context.Context) ([]APIKey, error) {
	all, err := k.client.HGetAll(ctx, k.hash).Result()
	if err != nil {
		return nil, fmt.Errorf("sluice: listing the API keys: %w", err)
	}
	out := make([]APIKey, 0, len(all))
	for id, v := range all {
		ak, _, err := decodeKey(id, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ak)
	}
	slices.SortFunc(out, func(a, b APIKey) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// decodeKey reads the stored record of key id.
func decodeKey(id, v string) (APIKey, []byte, error) {
	var rec keyRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil || rec.V != keyRecordVersion {
		return APIKey{}, nil, fmt.Errorf("sluice: API key %.32q: its stored record is not of version %d (written by another sluice?): revoke it and add a new one", id, keyRecordVersion)
	}
	sum, err := hex.DecodeString(rec.SHA256)
	if err != nil || len(sum) != sha256.Size || len(rec.Tenants) == 0 {
		return APIKey{}, nil, fmt.Errorf("sluice: API key %.32q: its stored record is damaged: revoke it and add a new one", id)
	}
	ak := APIKey{ID: id, Tenants: rec.Tenants, Created: time.Unix(rec.Created, 0)}
	if rec.Rotated != 0 {
		ak.Rotated = time.Unix(rec.Rotated, 0)
	}
	return ak, sum, nil
}

// Revoke deletes key id: the next request with it is refused.
func (k *Keys) Revoke(ctx context.Context, id string) error {
	n, err := k.client.HDel(ctx, k.hash, id).Result()
	switch {
	case err != nil:
		return fmt.Errorf("sluice: revoking an API key: %w", err)
	case n == 0:
		return fmt.Errorf("%w: %.32q", ErrKeyNotFound, id)
	}
	return nil
}

// rotateScript replaces a key's record only if the key still exists, so
// that a rotation racing a revocation does not bring the key back.
//
// KEYS[1] the hash; ARGV[1] the id, ARGV[2] the new record.
// Returns 1, or 0 when the key is gone.
var rotateScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// Rotate gives key id a new secret, keeping its id and tenants, and
// returns the whole new key; the old one is refused from the next
// request on. For a change-over without refusals, Add a second key for
// the same tenants, move the callers to it, then Revoke the first.
func (k *Keys) Rotate(ctx context.Context, id string) (string, error) {
	v, err := k.client.HGet(ctx, k.hash, id).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("%w: %.32q", ErrKeyNotFound, id)
	}
	if err != nil {
		return "", fmt.Errorf("sluice: rotating an API key: %w", err)
	}
	ak, _, err := decodeKey(id, v)
	if err != nil {
		return "", err
	}
	ak.Rotated = k.now().Truncate(time.Second)
	secret, rec := newSecret(ak)
	b, _ := json.Marshal(rec)
	ok, err := rotateScript.Run(ctx, k.client, []string{k.hash}, id, b).Int()
	switch {
	case err != nil:
		return "", fmt.Errorf("sluice: rotating an API key: %w", err)
	case ok == 0:
		return "", fmt.Errorf("%w: %.32q (revoked meanwhile)", ErrKeyNotFound, id)
	}
	return keyPrefix + id + "_" + secret, nil
}

// Authenticate returns the key that key (as a caller presents it) is, or
// an error wrapping ErrBadKey when it is malformed, unknown or revoked;
// another error means Redis could not say. The secret's hash is compared
// in constant time.
func (k *Keys) Authenticate(ctx context.Context, key string) (APIKey, error) {
	id, secret, ok := splitKey(key)
	if !ok {
		return APIKey{}, ErrBadKey
	}
	v, err := k.client.HGet(ctx, k.hash, id).Result()
	if errors.Is(err, redis.Nil) {
		return APIKey{}, ErrBadKey
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("sluice: reading the API keys: %w", err)
	}
	ak, want, err := decodeKey(id, v)
	if err != nil {
		return APIKey{}, err
	}
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return APIKey{}, ErrBadKey
	}
	return ak, nil
}

// splitKey splits a presented key into its id and secret, or reports
// false for a string that cannot be a key.
func splitKey(key string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 43 {
		return "", "", false
	}
	_, err := hex.DecodeString(id)
	return id, secret, err == nil
}
