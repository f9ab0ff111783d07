package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// deployDir is the repository's deploy/ folder, from this package's.
const deployDir = "../../deploy"

// describer is a prometheus.Registerer that only records the names of the
// metrics registered with it, whether or not they have series yet (a
// Gather would miss every vector still without children).
type describer struct{ names, histograms map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	_, vec := c.(*prometheus.HistogramVec)
	_, one := c.(prometheus.Histogram)
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
			if vec || one {
				d.histograms[m[1]] = true
			}
		}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

// exported returns the names of every sluice series the worker can
// serve: the metrics of the constructors queue/worker's Run calls, and
// each histogram's _bucket, _sum and _count.
func exported() map[string]bool {
	d := &describer{names: map[string]bool{}, histograms: map[string]bool{}}
	throttle.NewMetrics(d)
	queue.NewMetrics(d, "default")
	downstream.NewMetrics(d)
	redisconn.RegisterWatchMetrics(d)
	for h := range d.histograms {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			d.names[h+suffix] = true
		}
	}
	return d.names
}

var metricName = regexp.MustCompile(`\bsluice_[a-zA-Z0-9_]+`)

// unknown returns the sluice_ metric names in text that are not in known.
func unknown(text string, known map[string]bool) []string {
	seen := map[string]bool{}
	var bad []string
	for _, n := range metricName.FindAllString(text, -1) {
		if !known[n] && !seen[n] {
			seen[n] = true
			bad = append(bad, n)
		}
	}
	sort.Strings(bad)
	return bad
}

// TestDeployMetricsExist: every sluice_ metric the Grafana dashboard and
// the alert rules use is one the worker exports, so that a renamed metric
// or a typo does not leave a panel empty or an alert silent.
func TestDeployMetricsExist(t *testing.T) {
	known := exported()
	if len(known) < 10 {
		t.Fatalf("only %d metric names gathered: %v", len(known), known)
	}
	for _, file := range []string{"grafana-dashboard.json", "alerts.yaml"} {
		b, err := os.ReadFile(filepath.Join(deployDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(metricName.FindAllString(string(b), -1)); n < 5 {
			t.Errorf("%s names only %d sluice metrics", file, n)
		}
		if bad := unknown(string(b), known); len(bad) > 0 {
			t.Errorf("%s uses metrics the worker does not export: %v", file, bad)
		}
	}
	// The check itself: a misspelt name, a histogram's series and a
	// suffix on a name that is not a histogram's.
	if bad := unknown(`rate(sluice_throttle_pause_total[5m]) sluice_queue_wait_seconds_bucket sluice_queue_backlog_count`, known); strings.Join(bad, " ") != "sluice_queue_backlog_count sluice_throttle_pause_total" {
		t.Errorf("unknown found %v", bad)
	}
}

// TestDeployPolicyLoads: the policy file compose.yaml mounts is valid.
func TestDeployPolicyLoads(t *testing.T) {
	cfg, err := policy.Load(filepath.Join(deployDir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Downstreams["demo-api"]; !ok {
		t.Errorf("deploy/policy.yaml has no demo-api downstream: %v", cfg.Downstreams)
	}
}
