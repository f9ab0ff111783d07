package throttle

import (
	"github.com/sluicehq/sluice/internal/promreg"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the throttle's Prometheus collectors. Every series is
// labelled by the Limit's or Concurrency's Name only, never by key, so
// their number stays bounded. A nil *Metrics records nothing.
type Metrics struct {
	reservations *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	pauses       *prometheus.CounterVec
	leased       *prometheus.GaugeVec
	rate         *prometheus.GaugeVec
	slowdowns    *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (when not
// nil):
//
//	sluice_throttle_reservations_total{throttle,result}  result: granted, too_far, local, late, error
//	sluice_throttle_wait_seconds{throttle}               time from reservation to slot, histogram
//	sluice_throttle_pauses_total{throttle}               pauses set by this process
//	sluice_throttle_concurrency_in_use{throttle}         leased slots at the last acquire
//	sluice_throttle_rate{throttle}                       the fleet's adaptive pace now, units a second
//	sluice_throttle_slowdowns_total{throttle}            steps down of the pace set by this process
//
// It returns an error when reg already holds metrics of those names.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_reservations_total",
			Help: "Slot reservations by outcome: granted, too_far (beyond the allowed wait: an overflow), local (granted by the in-process fallback), late (woken too late to use it: left as a gap), error.",
		}, []string{"throttle", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_throttle_wait_seconds",
			Help:    "Time from reserving a slot to starting the call.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"throttle"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_pauses_total",
			Help: "Pauses set by this process after a 429 or 503 from the downstream.",
		}, []string{"throttle"}),
		leased: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_throttle_concurrency_in_use",
			Help: "Concurrency slots leased fleet-wide, as of this process's last acquire.",
		}, []string{"throttle"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_throttle_rate",
			Help: "The fleet's pace now in units a second, as of this process's last reservation: the limit's rate times its adaptive share.",
		}, []string{"throttle"}),
		slowdowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_slowdowns_total",
			Help: "Steps down of the fleet's pace set by this process after the downstream refused a call.",
		}, []string{"throttle"}),
	}
	if err := promreg.Register(reg, m.reservations, m.wait, m.pauses, m.leased, m.rate, m.slowdowns); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) reserved(name string, r Reservation, local bool) {
	if m == nil {
		return
	}
	switch {
	case !r.OK:
		m.reservations.WithLabelValues(name, "too_far").Inc()
	case local:
		m.reservations.WithLabelValues(name, "local").Inc()
	default:
		m.reservations.WithLabelValues(name, "granted").Inc()
	}
}

func (m *Metrics) failed(name string) {
	if m != nil {
		m.reservations.WithLabelValues(name, "error").Inc()
	}
}

func (m *Metrics) waited(name string, d time.Duration) {
	if m != nil {
		m.wait.WithLabelValues(name).Observe(d.Seconds())
	}
}

func (m *Metrics) paused(name string) {
	if m != nil {
		m.pauses.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) inUse(name string, n int64) {
	if m != nil {
		m.leased.WithLabelValues(name).Set(float64(n))
	}
}

func (m *Metrics) paced(c compiled, share float64) {
	if m != nil {
		m.rate.WithLabelValues(c.name).Set(float64(c.rl) / float64(c.pr) * 1e6 * share)
	}
}

func (m *Metrics) slowed(name string) {
	if m != nil {
		m.slowdowns.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) late(name string) {
	if m != nil {
		m.reservations.WithLabelValues(name, "late").Inc()
	}
}
