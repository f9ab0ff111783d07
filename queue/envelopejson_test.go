package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// checkFastAgrees fails t when decodeEnvelopeFast accepts s and decodes
// other than encoding/json does (or encoding/json refuses s).
func checkFastAgrees(t *testing.T, s []byte) bool {
	t.Helper()
	var fast envelope
	if !decodeEnvelopeFast(s, &fast) {
		return false
	}
	var want envelope
	if err := json.Unmarshal(s, &want); err != nil {
		t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %v", s, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%q:\nfast          %#v\nencoding/json %#v", s, fast, want)
	}
	return true
}

// envelopeEdits are changes to an envelope's text, each of which the fast
// decoder must either read as encoding/json does or leave to it.
var envelopeEdits = []func(r *rand.Rand, s string) string{
	func(_ *rand.Rand, s string) string {
		return strings.Replace(s, `"tenant":"`, `"tenant":"caf\u00e9 `, 1)
	},
	func(_ *rand.Rand, s string) string {
		return strings.Replace(s, `"tenant":"`, `"tenant":"café ☃ 𝄞 `, 1)
	},
	func(_ *rand.Rand, s string) string {
		return strings.Replace(s, `"tenant":"`, "\"tenant\":\"\xff\xfe ", 1)
	},
	func(_ *rand.Rand, s string) string {
		return strings.Replace(s, `"tenant":"`, `"tenant":"a\"b\\c\n<>&`, 1)
	},
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `"type":"`, "\"type\":\"\x01", 1) },
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `"tenant":`, `"TENANT":`, 1) },
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `"id":`, `"\u0069d":`, 1) },
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"extra":{"a":[1,null,"x"]},`, 1) },
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"cost":7,`, 1) },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"id":"again"}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"payload":""}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"payload":null}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"payload":"AAE="}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"payload":"AAE"}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"payload":"!!!!"}` },
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"units":12,"refused":3,"id_recorded":true}`
	},
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"id_recorded":false}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"id_recorded":1}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"cost":1e3}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"cost":1.0}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"cost":-0}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"cost":007}` },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"cost":-}` },
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"cost":9223372036854775808}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"cost":-9223372036854775808}`
	},
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"moves":"3"}` },
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"timeout":9223372036854775807,"units":-9223372036854775809}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"moves":-9223372036854775808,"retried":99999999999999999999}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"refused":9223372036854775807,"max_retry":-1}`
	},
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,"timeout":null}` },
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"run_at":"2026-01-02T03:04:05.5+01:00"}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"run_at":"2026-01-02 03:04:05Z"}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"run_at":"0000-01-01T00:00:00+23:59"}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"enqueued_at":"2026-13-02T03:04:05Z"}`
	},
	func(_ *rand.Rand, s string) string {
		return strings.TrimSuffix(s, "}") + `,"class":"gold","nonce":"n@:1"}`
	},
	func(_ *rand.Rand, s string) string { return strings.ReplaceAll(s, `,`, `, `) },
	func(_ *rand.Rand, s string) string { return " " + s },
	func(_ *rand.Rand, s string) string { return s + "\n" },
	func(_ *rand.Rand, s string) string { return s + "x" },
	func(_ *rand.Rand, s string) string { return s + "{}" },
	func(_ *rand.Rand, s string) string { return strings.Replace(s, `,`, `,,`, 1) },
	func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,}` },
	func(r *rand.Rand, s string) string { return s[:r.Intn(len(s))] },
	func(r *rand.Rand, s string) string { // drop a field
		fields := strings.Split(strings.Trim(s, "{}"), `,"`)
		i := r.Intn(len(fields))
		fields = append(fields[:i], fields[i+1:]...)
		return "{" + strings.Join(fields, `,"`) + "}"
	},
	func(r *rand.Rand, s string) string { // flip a byte
		b := []byte(s)
		b[r.Intn(len(b))] ^= byte(1 << r.Intn(8))
		return string(b)
	},
}

// TestFastEnvelopeDecoderAgrees: the fast decoder reads every envelope
// encode writes, to what encoding/json reads, and on random and edge
// envelopes (escapes, unicode and bytes that are not, missing, unknown
// and repeated keys, odd numbers and times, large payloads, cut and
// flipped texts) either agrees with encoding/json or leaves the text to
// it; and decodeJob decodes every one of them as encoding/json alone did.
func TestFastEnvelopeDecoderAgrees(t *testing.T) {
	jobs := sampleJobs(300)
	big := jobs[0]
	big.Payload = []byte(strings.Repeat("\x00\xffpayload ", 1<<14))
	big.RunAt = time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	big.Units, big.refused, big.idRecorded, big.Tenant = 99, 2, true, "tenant ☃ 𝄞"
	escaped := big
	escaped.Tenant = "tenant <&> \" \\ \u2028"
	jobs = append(jobs, big, escaped, Job{ID: "a", Tenant: "b", Type: "c"})
	r := rand.New(rand.NewSource(2))
	fast := 0
	for i, j := range jobs {
		env, err := j.encode()
		if err != nil {
			t.Fatal(err)
		}
		if !checkFastAgrees(t, []byte(env)) && !strings.Contains(env, `\`) {
			t.Fatalf("fast decoder left to encoding/json an envelope as encode writes it: %.200s", env)
		}
		for range 40 {
			s := env
			for range 1 + r.Intn(3) {
				if s != "" {
					s = envelopeEdits[r.Intn(len(envelopeEdits))](r, s)
				}
			}
			if checkFastAgrees(t, []byte(s)) {
				fast++
			}
			got, gotErr := decodeJob([]byte(s))
			want, wantErr := decodeJobJSON([]byte(s))
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() || !reflect.DeepEqual(got, want) {
				t.Fatalf("job %d, %.300q:\ndecodeJob     %#v, %v\nencoding/json %#v, %v", i, s, got, gotErr, want, wantErr)
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d edited envelopes took the fast decoder", fast)
	}
}

// decodeJobJSON is decodeJob as it was, with encoding/json alone.
func decodeJobJSON(s []byte) (*Job, error) {
	var e envelope
	if err := json.Unmarshal(s, &e); err != nil {
		return nil, fmt.Errorf("sluice: undecodable job envelope: %w", err)
	}
	j := e.Job
	j.nonce, j.enqueuedAt, j.retried, j.moves, j.refused, j.class, j.idRecorded = e.Nonce, e.EnqueuedAt, e.Retried, e.Moves, e.Refused, e.Class, e.IDRecorded
	if j.ID == "" || j.Tenant == "" || j.Type == "" {
		return nil, errors.New("sluice: job envelope lacks id, tenant or type")
	}
	return &j, nil
}

// FuzzFastEnvelopeDecoder: on any bytes, the fast decoder agrees with
// encoding/json or leaves the text to it.
func FuzzFastEnvelopeDecoder(f *testing.F) {
	for _, j := range sampleJobs(5) {
		env, _ := j.encode()
		f.Add([]byte(env))
	}
	for _, s := range []string{`{}`, `{"id":"a","tenant":"b","type":"c","cost":-0,"id_recorded":true}`,
		`{"id":"a","id":"b","payload":"","run_at":"2026-01-02T03:04:05Z"}`, `{"moves":1e3}`, "{\"id\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) { checkFastAgrees(t, s) })
}

func BenchmarkDecodeJob(b *testing.B) {
	j := Job{ID: "0f5c2a9e-1", nonce: "0123456789abcdef", Tenant: "tenant-4821", Type: "sluice.http",
		Payload:    []byte(`{"method":"POST","url":"http://127.0.0.1:8080/api/tenant-4821/items","header":{"Content-Type":"application/json"},"body":"{\"n\":1}"}`),
		Downstream: "api", enqueuedAt: time.Unix(1764230000, 123456789).UTC(), moves: 1, class: "gold"}
	env, err := j.encode()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeJob([]byte(env)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeJobAllocations: an envelope as encode writes it decodes with
// an allocation per string field, its payload and the job, no more
// (encoding/json made 15 for this one).
func TestDecodeJobAllocations(t *testing.T) {
	j := Job{ID: "j1", nonce: "0123456789abcdef", Tenant: "tenant-1", Type: "sluice.http", Payload: []byte(`{"url":"http://127.0.0.1/"}`),
		Downstream: "api", Cost: 2, enqueuedAt: time.Unix(1764230000, 123456789).UTC(), moves: 1, class: "gold"}
	env, err := j.encode()
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(env)
	if allocs := testing.AllocsPerRun(100, func() { decodeJob(b) }); allocs > 9 {
		t.Errorf("decodeJob(%s): %.0f allocations, want at most 9", env, allocs)
	}
}

// TestFastEnvelopeDecoderKnowsEveryField: each key of the envelope, its
// own and its Job's, is one the fast decoder reads, so that a field added
// to Job or envelope without it would fail here rather than send every
// envelope to encoding/json.
func TestFastEnvelopeDecoderKnowsEveryField(t *testing.T) {
	var walk func(reflect.Type)
	keys := 0
	walk = func(rt reflect.Type) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			var v string
			switch {
			case f.Type == reflect.TypeOf(time.Time{}):
				v = `"2026-01-02T03:04:05.5+01:00"`
			case f.Type.Kind() == reflect.String:
				v = `"x"`
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8:
				v = `"AAE="`
			case f.Type.Kind() == reflect.Bool:
				v = `true`
			case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
				v = `-7`
			default:
				t.Fatalf("envelope field %s has a type, %v, that this test does not know", f.Name, f.Type)
			}
			s := `{"` + name + `":` + v + `}`
			if !checkFastAgrees(t, []byte(s)) {
				t.Errorf("the fast decoder does not read %s (field %s)", s, f.Name)
			}
			keys++
		}
	}
	walk(reflect.TypeOf(envelope{}))
	if keys < 17 {
		t.Fatalf("found %d keys, want the 17 the envelope has at least", keys)
	}
}
