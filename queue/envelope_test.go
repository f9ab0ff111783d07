package queue

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParseEnvelope: whatever parseEnvelope accepts, encoding/json
// accepts too and decodes to the same Job, field for field (the worker's
// fast path may never read an envelope differently from the slow one).
func FuzzParseEnvelope(f *testing.F) {
	for _, j := range sampleJobs(20) {
		env, err := j.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(env))
	}
	for _, s := range []string{
		`{}`, `{"id":"a"}`, `{"id":"a","id":"b"}`, `{"payload":""}`, `{"payload":"A"}`, `{"payload":"AA==\n"}`,
		`{"cost":01}`, `{"cost":-0}`, `{"cost":1.5}`, `{"cost":1e3}`, `{"cost":-}`, `{"moves":999999999999999999}`,
		`{"enqueued_at":"2026-01-02T03:04:05Z"}`, `{"enqueued_at":"2026-01-02 03:04:05Z"}`, `{"enqueued_at":null}`,
		`{"ID":"a"}`, `{"id":"a",}`, `{"id":"a"} `, ` {"id":"a"}`, `{"id":"a\u0041"}`, `{"id":"\u00e9"}`,
		`{"timeout":-9223372036854775808}`, `{"max_retry":"3"}`, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Job
		if !parseEnvelope(data, &fast) {
			return
		}
		var slow Job
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("parseEnvelope accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nparseEnvelope %#v\nencoding/json %#v", data, fast, slow)
		}
	})
}

// TestEncodedEnvelopesTakeTheFastPath: every envelope encode writes for a
// job of printable ASCII fields is one parseEnvelope reads, so a worker
// decodes jobs of the usual shape without encoding/json. (encode escapes
// '"', '\\', '<', '>' and '&', and everything outside ASCII needs no
// escape but is left to encoding/json too: those take the slow way.)
func TestEncodedEnvelopesTakeTheFastPath(t *testing.T) {
	for _, j := range sampleJobs(500) {
		env, err := j.encode()
		if err != nil {
			t.Fatal(err)
		}
		var got Job
		if !parseEnvelope([]byte(env), &got) {
			t.Fatalf("parseEnvelope refused %s", env)
		}
		if !reflect.DeepEqual(got, j) {
			t.Fatalf("%s:\ngot  %#v\nwant %#v", env, got, j)
		}
	}
	// Text outside the fast path's shape still decodes, by encoding/json.
	j, err := decodeJob([]byte(`{ "id": "a", "tenant": "caf\u00e9", "type": "t", "cost": 2 }`))
	if err != nil || j.Tenant != "café" || j.Cost != 2 {
		t.Fatalf("decodeJob: %+v, %v; want tenant café, cost 2", j, err)
	}
}

// sampleJobs returns n jobs with every field sometimes set and sometimes
// zero, as decoding gives them back (UTC times, nil empty payloads).
func sampleJobs(n int) []Job {
	r := rand.New(rand.NewSource(1))
	pick := func(s string) string {
		if r.Intn(3) == 0 {
			return ""
		}
		return s
	}
	num := func() int64 {
		switch r.Intn(4) {
		case 0:
			return 0
		case 1:
			return -r.Int63n(1000)
		}
		return r.Int63n(1 << 40)
	}
	jobs := make([]Job, n)
	for i := range jobs {
		var payload []byte
		if r.Intn(4) > 0 {
			payload = make([]byte, r.Intn(300)+1)
			r.Read(payload)
		}
		jobs[i] = Job{
			ID: fmt.Sprintf("job-%d", r.Int63()), Nonce: pick(fmt.Sprintf("%016x", r.Uint64())),
			Tenant: "tenant {" + strings.Repeat("x", r.Intn(40)) + "}: !#$%'()*+,-./;=?@[]^_`|~", Type: "sluice.http",
			Payload: payload, Downstream: pick("api-1"), Cost: num(), MaxRetry: int(num()), Timeout: time.Duration(num()),
			EnqueuedAt: time.Unix(r.Int63n(4e9), r.Int63n(1e9)).UTC(), Retried: int(num()), Moves: int(num()), Class: pick("gold"),
		}
	}
	return jobs
}

// BenchmarkDecodeJob: a worker's cost of reading one envelope of the
// queue benchmark's shape (64-byte payload), by the fast path and by
// encoding/json alone.
func BenchmarkDecodeJob(b *testing.B) {
	j := Job{ID: "01JD5X8Q2V7K3M9N4P6R8T0W2Y", Nonce: "9f8e7d6c5b4a3210", Tenant: "tenant-0001", Type: "noop",
		Payload: make([]byte, 64), EnqueuedAt: time.Now().UTC(), Class: "default"}
	env, err := j.encode()
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(env)
	b.Run("parseEnvelope", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := decodeJob(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var j Job
			if err := json.Unmarshal(data, &j); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzAppendEnvelope: the envelope writer's fast path writes exactly what
// encoding/json writes for the job, and takes the slow path (json.Marshal)
// for strings encoding/json would escape and for times it refuses.
func FuzzAppendEnvelope(f *testing.F) {
	for i, j := range sampleJobs(20) {
		f.Add(j.ID, j.Nonce, j.Tenant, j.Type, j.Payload, j.Downstream, j.Cost, j.MaxRetry, int64(j.Timeout),
			j.EnqueuedAt.UnixNano(), int32(i*3600-36000), j.Retried, j.Moves, j.Class)
	}
	f.Add("a<b", "", "café", "t\"", []byte{}, "d&", int64(-1), -1, int64(1), int64(-1<<62), int32(0), 0, 0, "\x7f")
	f.Add("a", "n", "t", "x", []byte(nil), "", int64(0), 0, int64(0), int64(0), int32(-1), 0, 0, "")
	f.Fuzz(func(t *testing.T, id, nonce, tenant, typ string, payload []byte, downstream string, cost int64,
		maxRetry int, timeout, at int64, zone int32, retried, moves int, class string) {
		j := Job{ID: id, Nonce: nonce, Tenant: tenant, Type: typ, Payload: payload, Downstream: downstream,
			Cost: cost, MaxRetry: maxRetry, Timeout: time.Duration(timeout),
			EnqueuedAt: time.Unix(0, at).In(time.FixedZone("z", int(zone%(24*3600)))), Retried: retried, Moves: moves, Class: class}
		want, werr := json.Marshal(&j)
		got, ok := j.appendEnvelope(nil)
		if ok && (werr != nil || string(got) != string(want)) {
			t.Fatalf("appendEnvelope wrote\n%s\nencoding/json\n%s (%v)", got, want, werr)
		}
		env, err := j.envelope()
		if (err == nil) != (werr == nil) || string(env) != string(want) {
			t.Fatalf("envelope %s (%v); encoding/json %s (%v)", env, err, want, werr)
		}
		if plainJSON(id) && plainJSON(nonce) && plainJSON(tenant) && plainJSON(typ) && plainJSON(downstream) &&
			plainJSON(class) && werr == nil && !ok {
			t.Fatalf("plain job %+v took the slow path", j)
		}
	})
}

// BenchmarkEnvelope: a producer's cost of writing one envelope of the
// queue benchmark's shape, by the fast path and by encoding/json alone.
func BenchmarkEnvelope(b *testing.B) {
	j := Job{ID: "0123456789abcdef0123456789abcdef", Nonce: "9f8e7d6c5b4a3210", Tenant: "tenant-0001", Type: "noop",
		Payload: make([]byte, 64), EnqueuedAt: time.Now().UTC(), Class: "default"}
	b.Run("appendEnvelope", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := j.envelope(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := json.Marshal(&j); err != nil {
				b.Fatal(err)
			}
		}
	})
}
