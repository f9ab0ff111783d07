package queue

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseJobOneMeaning: a text that encoding/json would read one way
// and a proxy another (a key twice, a key in another case, an escaped
// key) is refused; the plain forms are read field by field.
func TestParseJobOneMeaning(t *testing.T) {
	for _, bad := range []struct{ text, want string }{
		{`{"tenant":"alice","TENANT":"mallory","type":"x"}`, `unknown key "TENANT"`},
		{`{"tenant":"alice","type":"x","tenant":"mallory"}`, `key "tenant" given twice`},
		{`{"tenant":"alice","\u0074enant":"mallory","type":"x"}`, `key "tenant" given twice`},
		{`{"Tenant":"mallory","type":"x"}`, `unknown key "Tenant"`},
		{`{"tenant":"a","type":"x","extra":1}`, `unknown key "extra"`},
		{`{"tenant":"a","type":"x"} {"tenant":"b"}`, "one JSON object expected"},
		{`["tenant"]`, "a JSON object expected"},
		{``, "empty"},
		{`{"tenant":"a","type":"x","timeout":"soon"}`, "timeout"},
		{`{"tenant":"a","type":"x",`, "EOF"},
	} {
		_, err := ParseJob([]byte(bad.text))
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v; want ErrInvalidJob with %q", bad.text, err, bad.want)
		}
	}
	job, err := ParseJob([]byte(`{"id":"o-1","tenant":"alice","type":"sluice.http","downstream":"api","cost":2,"max_retry":3,"timeout":"1.5s","payload":{"url":"https://a/"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Job{ID: "o-1", Tenant: "alice", Type: "sluice.http", Downstream: "api", Cost: 2, MaxRetry: 3, Timeout: 1500 * time.Millisecond, Payload: []byte(`{"url":"https://a/"}`)}
	if job.ID != want.ID || job.Tenant != want.Tenant || job.Type != want.Type || job.Downstream != want.Downstream ||
		job.Cost != want.Cost || job.MaxRetry != want.MaxRetry || job.Timeout != want.Timeout || string(job.Payload) != string(want.Payload) {
		t.Fatalf("parsed %+v\nwant %+v", job, want)
	}
}

// FuzzParseJob: whatever ParseJob accepts, every reader agrees on: the
// object's keys are the fields' own, each once, and the tenant it read is
// the one a plain map decoding reads.
func FuzzParseJob(f *testing.F) {
	for _, s := range []string{
		`{"tenant":"alice","type":"x"}`,
		`{"tenant":"alice","TENANT":"mallory","type":"x"}`,
		`{"tenant":"alice","\u0074enant":"mallory","type":"x"}`,
		`{"tenant":"a","type":"x","payload":{"tenant":"b","tenant":"c"}}`,
		`{"tenant":"a\u0000","type":"x","cost":1e3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := ParseJob(data)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("ParseJob accepted what is no JSON object: %q", data)
		}
		for k := range m {
			if !jobKeys[k] {
				t.Fatalf("ParseJob accepted key %q", k)
			}
		}
		var tenant string
		if raw, ok := m["tenant"]; ok {
			if err := json.Unmarshal(raw, &tenant); err != nil {
				t.Fatalf("tenant %s: %v", raw, err)
			}
		}
		if tenant != job.Tenant {
			t.Fatalf("ParseJob read tenant %q where a map reads %q: %q", job.Tenant, tenant, data)
		}
	})
}
