package redisconn

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRouteDriverLog: go-redis's "failed to dial" lines reach the slog
// logger at debug level, and nowhere at a higher one.
func TestRouteDriverLog(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var debug, info bytes.Buffer
	for _, c := range []struct {
		buf   *bytes.Buffer
		level slog.Level
	}{{&debug, slog.LevelDebug}, {&info, slog.LevelInfo}} {
		RouteDriverLog(slog.New(slog.NewTextHandler(c.buf, &slog.HandlerOptions{Level: c.level})))
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			t.Fatal("PING reached a closed port")
		}
		rdb.Close()
	}
	if !strings.Contains(debug.String(), "level=DEBUG") || !strings.Contains(debug.String(), "go-redis: ") {
		t.Errorf("nothing at debug level:\n%s", debug.String())
	}
	if info.Len() != 0 {
		t.Errorf("go-redis logged above debug level:\n%s", info.String())
	}
}
