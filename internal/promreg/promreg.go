// Package promreg registers a package's Prometheus collectors as one.
package promreg

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs with reg (nothing when reg is nil). It returns an
// error, rather than panicking, when one cannot be (most often: the same
// metrics registered twice); those registered before it are unregistered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("sluice: registering metrics: %w", err)
		}
	}
	return nil
}
