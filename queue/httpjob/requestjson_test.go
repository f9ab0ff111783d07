package httpjob

import (
	"encoding/json"
	"errors"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/downstream"
)

// checkRequestFastAgrees fails t when decodeRequestFast accepts s and
// decodes other than encoding/json does (or encoding/json refuses s).
func checkRequestFastAgrees(t *testing.T, s []byte) bool {
	t.Helper()
	var fast Request
	if !decodeRequestFast(s, &fast) {
		return false
	}
	var want Request
	if err := json.Unmarshal(s, &want); err != nil {
		t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %v", s, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%q:\nfast          %#v\nencoding/json %#v", s, fast, want)
	}
	return true
}

// parseRequestJSON is ParseRequest as it was, with encoding/json alone.
func parseRequestJSON(payload []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		return Request{}, err
	}
	return req, nil
}

// TestFastRequestDecoderAgrees: on payloads as producers write them and
// on random edits of them (escapes, unicode and bytes that are not,
// whitespace, unknown, repeated and re-cased keys, null, other types, cut
// and flipped texts), the fast decoder either reads what encoding/json
// reads or leaves the payload to it, and ParseRequest accepts and refuses
// what it did with encoding/json alone.
func TestFastRequestDecoderAgrees(t *testing.T) {
	payloads := []string{
		`{"url":"http://127.0.0.1:8080/api/tenant-1/items/7"}`,
		`{"method":"POST","url":"http://127.0.0.1/v1/chat","body":"{}"}`,
		`{"method":"POST","url":"http://127.0.0.1/v1/orders","header":{"Content-Type":"application/json","X-A":"b"},"body":"{\"n\":1,\"s\":\"caf\u00e9 ☃\"}"}`,
		`{ "url" : "http://127.0.0.1/é?q=𝄞" , "header" : { } }`,
		`{"header":{},"body":""}`, `{}`,
	}
	edits := []func(r *rand.Rand, s string) string{
		func(_ *rand.Rand, s string) string {
			return strings.Replace(s, `"url":"`, `"url":"caf\u00e9\t\\\"/`, 1)
		},
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `"url":"`, "\"url\":\"\xff\xfe", 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `"url":"`, "\"url\":\"\x01", 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `"url":`, `"URL":`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `"url":`, `"\u0075rl":`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"extra":[1,{"a":null}],`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"url":"http://other/",`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"header":{"K":"1"},`, 1) },
		func(_ *rand.Rand, s string) string {
			return strings.Replace(s, `{`, `{"header":{"K":"1","K":"2","k":"3"},`, 1)
		},
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"header":{"K":1},`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"header":null,`, 1) },
		func(_ *rand.Rand, s string) string {
			return strings.Replace(s, `{`, `{"header":{"\u00e9\n":"\ud800"},`, 1)
		},
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"method":null,`, 1) },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `{`, `{"body":5,`, 1) },
		func(_ *rand.Rand, s string) string {
			return strings.Replace(s, `{`, `{"body":"`+strings.Repeat("é", 5000)+`",`, 1)
		},
		func(_ *rand.Rand, s string) string { return strings.ReplaceAll(s, `,`, " ,\n\t") },
		func(_ *rand.Rand, s string) string { return "\r\n " + s + " \n" },
		func(_ *rand.Rand, s string) string { return s + "x" },
		func(_ *rand.Rand, s string) string { return s + "{}" },
		func(_ *rand.Rand, s string) string { return strings.Replace(s, `,`, `,,`, 1) },
		func(_ *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + `,}` },
		func(r *rand.Rand, s string) string { return s[:r.Intn(len(s))] },
		func(r *rand.Rand, s string) string {
			b := []byte(s)
			b[r.Intn(len(b))] ^= byte(1 << r.Intn(8))
			return string(b)
		},
	}
	r := rand.New(rand.NewSource(3))
	fast := 0
	for _, p := range payloads {
		if !checkRequestFastAgrees(t, []byte(p)) {
			t.Fatalf("fast decoder left to encoding/json %s", p)
		}
		for range 2000 {
			s := p
			for range 1 + r.Intn(3) {
				if s != "" {
					s = edits[r.Intn(len(edits))](r, s)
				}
			}
			if checkRequestFastAgrees(t, []byte(s)) {
				fast++
			}
			got, gotErr := ParseRequest([]byte(s))
			want, wantErr := parseRequestJSON([]byte(s))
			if wantErr == nil {
				wantErr = checkParsed(want)
				if wantErr != nil {
					want = Request{}
				}
			}
			if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%.300q:\nParseRequest  %#v, %v\nencoding/json %#v, %v", s, got, gotErr, want, wantErr)
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d edited payloads took the fast decoder", fast)
	}
}

// FuzzFastRequestDecoder: on any bytes, the fast decoder agrees with
// encoding/json or leaves the payload to it.
func FuzzFastRequestDecoder(f *testing.F) {
	for _, s := range []string{`{"url":"http://127.0.0.1/x"}`, `{"method":"POST","url":"u","header":{"A":"b"},"body":"{\"n\":1}"}`,
		`{ "header" : {} }`, `{"url":"\ud800"}`, "{\"url\":\"\xff\"}", `{"url":"a","url":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) { checkRequestFastAgrees(t, s) })
}

// TestParseRequestAllocations: a payload of plain strings decodes with an
// allocation per string and the header map, no more (encoding/json made
// 8 for this one).
func TestParseRequestAllocations(t *testing.T) {
	p := []byte(`{"method":"POST","url":"http://127.0.0.1:8080/v1/orders","body":"hello"}`)
	if allocs := testing.AllocsPerRun(100, func() { ParseRequest(p) }); allocs > 3 {
		t.Errorf("ParseRequest(%s): %.0f allocations, want at most 3", p, allocs)
	}
}

func BenchmarkParseRequest(b *testing.B) {
	for name, p := range map[string]string{
		"url":  `{"url":"http://127.0.0.1:8080/api/tenant-4821/items/123456"}`,
		"post": `{"method":"POST","url":"http://127.0.0.1:8080/v1/orders","header":{"Content-Type":"application/json"},"body":"{\"n\":1}"}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRequest([]byte(p)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkParsed is what ParseRequest refuses in a decoded request.
func checkParsed(req Request) error {
	if req.URL == "" {
		return errors.New("url is required")
	}
	return downstream.CheckRequest(req.Method, req.Header)
}

// TestFastRequestDecoderKnowsEveryField: each key of Request is one the
// fast decoder reads, so that a field added to Request without it fails
// here rather than send every payload to encoding/json.
func TestFastRequestDecoderKnowsEveryField(t *testing.T) {
	rt := reflect.TypeOf(Request{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		v := `"x"`
		if f.Type.Kind() == reflect.Map {
			v = `{"K":"v"}`
		}
		if s := `{"` + name + `":` + v + `}`; !checkRequestFastAgrees(t, []byte(s)) {
			t.Errorf("the fast decoder does not read %s (field %s)", s, f.Name)
		}
	}
}
