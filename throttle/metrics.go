package throttle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Metrics are the throttle's Prometheus collectors. Every series is
// labelled by the Limit's or Concurrency's Name only, never by key, so
// their number stays bounded. A nil *Metrics in Options records nothing.
type Metrics struct {
	reservations *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	pauses       *prometheus.CounterVec
	leased       *prometheus.GaugeVec
	lost         *prometheus.CounterVec
	rate         *prometheus.GaugeVec
	slowdowns    *prometheus.CounterVec
	settled      *prometheus.CounterVec
}

// NewMetrics creates the collectors (docs/throttle.md lists them) and
// registers them with reg when it is not nil. It returns an error when reg
// already holds metrics of those names.
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
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_leases_lost_total",
			Help: "Concurrency leases this process could not extend while their call ran (run out, or Redis unreachable): each call was cancelled.",
		}, []string{"throttle"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_throttle_rate",
			Help: "The fleet's pace now in units a second, as of this process's last reservation: the limit's rate times its adaptive share.",
		}, []string{"throttle"}),
		slowdowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_slowdowns_total",
			Help: "Steps down of the fleet's pace set by this process after the downstream refused a call.",
		}, []string{"throttle"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_settled_units_total",
			Help: "Units corrected by Settle once calls reported their real cost, of the Limit's own rate: refund (estimated but not used) or debt (used beyond the estimate).",
		}, []string{"throttle", "kind"}),
	}
	if err := promreg.Register(reg, m.reservations, m.wait, m.pauses, m.leased, m.lost, m.rate, m.slowdowns, m.settled); err != nil {
		return nil, err
	}
	return m, nil
}

// perSecond is c's own rate in units a second at the given share of it.
func (c compiled) perSecond(share float64) float64 {
	return float64(c.rl) / float64(c.pr) * 1e6 * share
}

// result names r's outcome in sluice_throttle_reservations_total.
func (r Reservation) result() string {
	switch {
	case !r.OK:
		return "too_far"
	case r.Local:
		return "local"
	}
	return "granted"
}
