package keyspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxEncoded is the longest tag body Encode may return: "#" and 64 hex
// digits of a SHA-256 (a verbatim id is at most "=" and MaxVerbatim bytes).
const maxEncoded = 1 + 2*sha256.Size

// checkEncoding checks, independently of Encode's code, what its doc
// promises for one id and its encoding enc.
func checkEncoding(id, enc string) error {
	switch {
	case enc == "":
		return errors.New("empty encoding of a non-empty id")
	case strings.ContainsAny(enc, "{}"):
		return errors.New("encoding contains a brace")
	case len(enc) > maxEncoded:
		return errors.New("encoding longer than 65 bytes")
	case !utf8.ValidString(enc):
		return errors.New("encoding is not valid UTF-8")
	}
	switch enc[0] {
	case '=':
		// Verbatim: the id itself, short and of the plain alphabet only.
		if enc[1:] != id {
			return errors.New("verbatim encoding differs from the id")
		}
		if len(id) > MaxVerbatim {
			return errors.New("id longer than MaxVerbatim kept verbatim")
		}
		for i := 0; i < len(id); i++ {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", rune(id[i])) {
				return errors.New("id with a byte outside [A-Za-z0-9_.-] kept verbatim")
			}
		}
	case '#':
		sum := sha256.Sum256([]byte(id))
		if enc[1:] != hex.EncodeToString(sum[:]) {
			return errors.New("hashed encoding is not the hex SHA-256 of the id")
		}
	default:
		return errors.New("encoding starts with neither = nor #")
	}
	return nil
}

// tagOf returns the hash tag Redis Cluster hashes a key by, following the
// rule of the Cluster specification: the bytes between the first '{' and
// the first '}' after it, when there are any; otherwise the whole key.
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// slot is Redis Cluster's key slot: CRC16-XMODEM of the hash tag mod 16384.
func slot(key string) uint16 {
	var crc uint16
	for _, b := range []byte(tagOf(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestSlotFunction(t *testing.T) {
	// Values of CLUSTER KEYSLOT; 12739 is CRC16-XMODEM's check value 0x31C3.
	for key, want := range map[string]uint16{"123456789": 12739, "foo": 12182, "{foo}.bar": 12182} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	// The tag rule of the Cluster specification.
	for key, want := range map[string]string{
		"{user1000}.following": "user1000",
		"foo{}{bar}":           "foo{}{bar}", // empty first tag: the whole key
		"foo{{bar}}zap":        "{bar",
		"foo{bar}{zap}":        "bar",
		"nobrace":              "nobrace",
		"open{only":            "open{only",
	} {
		if got := tagOf(key); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// hostileIDs are ids a tenant or an API could send.
func hostileIDs() []string {
	return []string{
		"a", "acme", "A-b_c.9", strings.Repeat("x", MaxVerbatim), strings.Repeat("x", MaxVerbatim+1),
		"{", "}", "{}", "{acme}", "a}b{c", "}{", "acme}", "{acme",
		"a:b", ":", "acme:{x}", "sluice:q:t:{=default}:=acme",
		"new\nline", "\r\n", "tab\there", " ", "sp ace", "\x00", "nul\x00byte",
		"ünïcödé", "日本語", "🙂", "\xff\xfe", "=acme", "#acme",
		"#" + strings.Repeat("0", 64), "=" + strings.Repeat("x", 64),
		strings.Repeat("m", 1<<20),
	}
}

func TestEncodeHostileIDs(t *testing.T) {
	seen := map[string]string{}
	for _, id := range hostileIDs() {
		enc, err := Encode(id)
		if err != nil {
			t.Fatalf("Encode(%.40q): %v", id, err)
		}
		if err := checkEncoding(id, enc); err != nil {
			t.Errorf("Encode(%.40q) = %q: %v", id, enc, err)
		}
		if other, ok := seen[enc]; ok {
			t.Errorf("ids %.40q and %.40q share the encoding %q", id, other, enc)
		}
		seen[enc] = id
	}
	// The boundary of the verbatim form.
	for _, c := range []struct {
		id   string
		kind byte
	}{
		{strings.Repeat("a", MaxVerbatim), '='},
		{strings.Repeat("a", MaxVerbatim+1), '#'},
		{"acme", '='},
		{"acme:1", '#'},
		{"=acme", '#'},
	} {
		if enc, _ := Encode(c.id); enc[0] != c.kind {
			t.Errorf("Encode(%.40q) = %q; want the %c form", c.id, enc, c.kind)
		}
	}
}

func TestEncodeEmpty(t *testing.T) {
	if enc, err := Encode(""); !errors.Is(err, ErrEmptyID) || enc != "" {
		t.Fatalf("Encode(\"\") = %q, %v; want ErrEmptyID", enc, err)
	}
	if k, err := Key("sluice:q", "t", ""); !errors.Is(err, ErrEmptyID) || k != "" {
		t.Fatalf("Key with an empty id = %q, %v; want ErrEmptyID", k, err)
	}
}

// TestKeyOneTagPerID: every key built for an id has exactly one hash tag,
// the id's encoding, so all of an id's keys share a Cluster slot whatever
// their prefix and kind, and their length is bounded by the prefix and
// kind alone.
func TestKeyOneTagPerID(t *testing.T) {
	prefixes := []string{"sluice:q", "sluice:rl", "sluice:th", "app:sluice:q", "x"}
	kinds := []string{"t", "meta", "adm", "rate", "conc", "tb", "gcra"}
	for _, id := range hostileIDs() {
		enc, _ := Encode(id)
		want := slot("{" + enc + "}")
		for _, p := range prefixes {
			for _, k := range kinds {
				key, err := Key(p, k, id)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || !strings.HasSuffix(key, "}") {
					t.Fatalf("Key(%q, %q, %.40q) = %q: want exactly one {...} tag, at the end", p, k, id, key)
				}
				if key != p+":"+k+":{"+enc+"}" {
					t.Fatalf("Key(%q, %q, %.40q) = %q", p, k, id, key)
				}
				if len(key) > len(p)+len(k)+4+maxEncoded {
					t.Fatalf("Key(%q, %q, %.40q) is %d bytes", p, k, id, len(key))
				}
				if got := slot(key); got != want {
					t.Fatalf("Key(%q, %q, %.40q) hashes to slot %d, the id's tag to %d", p, k, id, got, want)
				}
			}
		}
	}
}

// FuzzEncode: for any two ids, Encode is injective (different ids, different
// tags), never puts a brace in the tag, keeps it within 65 bytes, never
// returns an empty tag for a non-empty id, and is deterministic; Key wraps
// the tag in exactly one pair of braces.
func FuzzEncode(f *testing.F) {
	ids := hostileIDs()
	for i, a := range ids {
		if len(a) > 4096 {
			a = a[:4096] // keep the seed corpus small; the 1 MiB id is a unit test
		}
		b := ids[(i+1)%len(ids)]
		if len(b) > 4096 {
			b = b[:4097]
		}
		f.Add(a, b)
	}
	f.Add("acme", "acme")
	f.Add("", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, erra := Encode(a)
		eb, errb := Encode(b)
		for _, c := range []struct {
			id, enc string
			err     error
		}{{a, ea, erra}, {b, eb, errb}} {
			if c.id == "" {
				if !errors.Is(c.err, ErrEmptyID) || c.enc != "" {
					t.Fatalf("Encode(\"\") = %q, %v; want ErrEmptyID", c.enc, c.err)
				}
				continue
			}
			if c.err != nil {
				t.Fatalf("Encode(%q): %v", c.id, c.err)
			}
			if err := checkEncoding(c.id, c.enc); err != nil {
				t.Fatalf("Encode(%q) = %q: %v", c.id, c.enc, err)
			}
			again, _ := Encode(c.id)
			if again != c.enc {
				t.Fatalf("Encode(%q) gave %q, then %q", c.id, c.enc, again)
			}
			key, err := Key("sluice:q", "t", c.id)
			if err != nil || key != "sluice:q:t:{"+c.enc+"}" || tagOf(key) != c.enc {
				t.Fatalf("Key(sluice:q, t, %q) = %q, %v", c.id, key, err)
			}
		}
		if a != "" && b != "" && (a == b) != (ea == eb) {
			t.Fatalf("Encode(%q) = %q and Encode(%q) = %q", a, ea, b, eb)
		}
	})
}

// TestSlot: Redis Cluster's key hash, against CLUSTER KEYSLOT's answers
// (foo 12182, {user1000}.following 3443) and CRC-16/XMODEM's check value.
func TestSlot(t *testing.T) {
	for tag, want := range map[string]int{"foo": 12182, "user1000": 3443, "123456789": 0x31C3 % Slots} {
		if got := Slot(tag); got != want {
			t.Errorf("Slot(%q) = %d, want %d", tag, got, want)
		}
	}
}
