package queue

import (
	"context"
	"time"
)

// dispatchOne runs one claim on the first shard.
func (s *Server) dispatchOne(ctx context.Context) (time.Duration, error) {
	return s.claim(ctx, s.disp[0])
}
