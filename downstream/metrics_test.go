package downstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/throttle"
)

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestResponseCodeLabelsAreBounded: sluice_downstream_responses_total
// keeps its own label for each status people alert on and folds every
// other answer, whatever number a downstream sends, into its class, so a
// downstream cannot grow the series without bound (issue 19, finding 11).
func TestResponseCodeLabelsAreBounded(t *testing.T) {
	steps := []struct {
		status int // 0: no response
		label  string
	}{
		{200, "200"}, {201, "201"}, {202, "202"}, {204, "204"},
		{400, "400"}, {401, "401"}, {403, "403"}, {404, "404"}, {409, "409"}, {422, "422"}, {429, "429"},
		{500, "500"}, {502, "502"}, {503, "503"}, {504, "504"},
		{203, "2xx"}, {299, "2xx"}, {301, "3xx"}, {304, "3xx"}, {399, "3xx"},
		{402, "4xx"}, {418, "4xx"}, {499, "4xx"}, {501, "5xx"}, {599, "5xx"},
		{100, "other"}, {199, "other"}, {600, "other"}, {639, "other"}, {999, "other"}, {-1, "other"},
		{0, "error"},
	}
	for _, s := range steps {
		if got := codeLabel(s.status); s.status != 0 && got != s.label {
			t.Errorf("codeLabel(%d) = %q, want %q", s.status, got, s.label)
		}
	}
	// Through a Transport, as the worker counts them.
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice: no error")
	}
	tr := &Transport{Throttle: newThrottle(t), Limit: throttle.Limit{Name: "api", Rate: 1000}, Metrics: m,
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			code := r.Context().Value(statusKey{}).(int)
			if code == 0 {
				return nil, errors.New("no answer")
			}
			return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
		})}
	want := map[string]float64{}
	for _, s := range steps {
		ctx := context.WithValue(WithOwnPause(context.Background()), statusKey{}, s.status)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/x", nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
		want[s.label]++
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_downstream_responses_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					got[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	var labels []string
	for l := range got {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	if len(got) != len(want) {
		t.Fatalf("code labels %v; want the %d of the table", labels, len(want))
	}
	for l, n := range want {
		if got[l] != n {
			t.Errorf("code %q counted %v times, want %v (labels %v)", l, got[l], n, labels)
		}
	}
}

type statusKey struct{}
