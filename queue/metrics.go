package queue

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// Metrics are the queue's Prometheus collectors, labelled by queue, by
// downstream or by tenant metrics class; tenants are never labels (their
// number is unbounded). The README lists them.
type Metrics struct {
	handed, starts, recovered       prometheus.Counter
	waitStart                       *prometheus.HistogramVec
	putBack, sleeps, putBackSeconds *prometheus.CounterVec
	refusedOut, shareWaits          *prometheus.CounterVec
	circuitWaits                    *prometheus.CounterVec
	backlog                         *prometheus.GaugeVec
}

// NewMetrics creates the queue's collectors for queue and registers them
// with reg (when not nil). It returns an error when reg already holds the
// queue's metrics.
func NewMetrics(reg prometheus.Registerer, queue string) (*Metrics, error) {
	l := prometheus.Labels{"queue": queue}
	m := &Metrics{
		handed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_queue_handed_over_total",
			Help: "Jobs moved from the waiting room into asynq.", ConstLabels: l}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_queue_started_total",
			Help: "Jobs whose handler started (after their throttle slot).", ConstLabels: l}),
		waitStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_queue_wait_seconds",
			Help: "Time from enqueue to the handler's start, by tenant class.", ConstLabels: l,
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}}, []string{"class"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_queue_backlog",
			Help: "Jobs waiting in sluice's waiting room, not yet handed to asynq, by tenant class (sampled).", ConstLabels: l}, []string{"class"}),
		putBackSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_throttled_seconds_total",
			Help: "Time jobs were put back in the waiting room for (throttle or 429), by tenant class.", ConstLabels: l}, []string{"class"}),
		putBack: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_throttled_total",
			Help: "Jobs put back in the waiting room because their slot was too far away.", ConstLabels: l}, []string{"downstream"}),
		sleeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_tenant_sleeps_total",
			Help: "Tenants skipped before dequeue because their throttle had no slot soon.", ConstLabels: l}, []string{"downstream"}),
		refusedOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_refused_archived_total",
			Help: "Jobs archived because their downstream refused them max_refusals times (429 or 503).", ConstLabels: l}, []string{"downstream"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_queue_recovered_total",
			Help: "Jobs of a dead worker process that this process put back in the waiting room.", ConstLabels: l}),
		circuitWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_circuit_waits_total",
			Help: "Jobs put back in the waiting room because their throttle key's circuit was open.", ConstLabels: l}, []string{"downstream"}),
		shareWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_share_waits_total",
			Help: "Jobs put back in the waiting room because their throttle key held its share of the worker's goroutines.", ConstLabels: l}, []string{"downstream"}),
	}
	if err := promreg.Register(reg, m.handed, m.starts, m.waitStart, m.putBack, m.sleeps, m.backlog, m.putBackSeconds, m.refusedOut, m.shareWaits, m.recovered, m.circuitWaits); err != nil {
		return nil, err
	}
	return m, nil
}
