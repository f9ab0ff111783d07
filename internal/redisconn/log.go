package redisconn

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// RouteDriverLog sends go-redis's own log lines to log at debug level.
// go-redis writes them to the process's standard error by default: with
// Redis down, one "pool.go:770: ... failed to dial" line for every
// connection attempt, printed before the command's own error, which says
// the same once. The setting is go-redis's, for the whole process.
func RouteDriverLog(log *slog.Logger) {
	redis.SetLogger(driverLog{log})
}

// driverLog is go-redis's logging interface on a slog.Logger.
type driverLog struct{ log *slog.Logger }

func (d driverLog) Printf(ctx context.Context, format string, v ...any) {
	d.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
