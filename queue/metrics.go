package queue

import (
	"github.com/sluicehq/sluice/internal/promreg"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the queue's Prometheus collectors. Tenants are never labels
// (their number is unbounded); series are per queue and per downstream.
// A nil *Metrics records nothing.
type Metrics struct {
	handed    prometheus.Counter
	starts    prometheus.Counter
	waitStart *prometheus.HistogramVec
	putBack   *prometheus.CounterVec
	sleeps    *prometheus.CounterVec
	backlog   *prometheus.GaugeVec
	putBackS  *prometheus.CounterVec
}

// NewMetrics creates the queue's collectors for queue and registers them
// with reg (when not nil):
//
//	sluice_queue_handed_over_total        jobs moved from the waiting room to asynq
//	sluice_queue_started_total            jobs whose handler started
//	sluice_queue_wait_seconds{class}      enqueue to start, histogram
//	sluice_queue_backlog{class}           jobs in the waiting room, sampled by each worker
//	sluice_queue_throttled_seconds_total{class}  time jobs were put back for (throttle, 429)
//	sluice_queue_throttled_total{downstream}  jobs put back because their slot was too far
//	sluice_queue_tenant_sleeps_total{downstream} tenants skipped before dequeue
//
// class is the tenant's metrics class from its policy ("default" when it
// has none): tenants are never labels.
//
// It returns an error when reg already holds the queue's metrics.
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
		putBackS: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_throttled_seconds_total",
			Help: "Time jobs were put back in the waiting room for (throttle or 429), by tenant class.", ConstLabels: l}, []string{"class"}),
		putBack: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_throttled_total",
			Help: "Jobs put back in the waiting room because their slot was too far away.", ConstLabels: l}, []string{"downstream"}),
		sleeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_queue_tenant_sleeps_total",
			Help: "Tenants skipped before dequeue because their throttle had no slot soon.", ConstLabels: l}, []string{"downstream"}),
	}
	if err := promreg.Register(reg, m.handed, m.starts, m.waitStart, m.putBack, m.sleeps, m.backlog, m.putBackS); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) handedOver(n int) {
	if m != nil {
		m.handed.Add(float64(n))
	}
}

func (m *Metrics) started(j *Job) {
	if m != nil {
		m.starts.Inc()
		m.waitStart.WithLabelValues(j.Class()).Observe(time.Since(j.enqueuedAt).Seconds())
	}
}

func (m *Metrics) throttled(downstream string) {
	if m != nil {
		m.putBack.WithLabelValues(downstream).Inc()
	}
}

func (m *Metrics) slept(downstream string) {
	if m != nil {
		m.sleeps.WithLabelValues(downstream).Inc()
	}
}

func (m *Metrics) putBackFor(j *Job, d time.Duration) {
	if m != nil {
		m.putBackS.WithLabelValues(j.Class()).Add(d.Seconds())
	}
}

func (m *Metrics) sampleBacklog(byClass map[string]int64) {
	if m == nil {
		return
	}
	m.backlog.Reset()
	for c, n := range byClass {
		m.backlog.WithLabelValues(c).Set(float64(n))
	}
}
