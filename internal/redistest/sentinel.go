package redistest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of StartSentinel give the
// primary.
const SentinelMaster = "sluice"

// SentinelConfig configures StartSentinel.
type SentinelConfig struct {
	// Args are extra redis-server arguments of the primary and the
	// replica, as Config.Args.
	Args []string
	// Password is the servers' requirepass (and the replica's
	// masterauth, the Sentinels' auth-pass).
	Password string
	// SentinelPassword is the Sentinels' own requirepass.
	SentinelPassword string
}

// Sentinel is a primary, one replica of it and three Redis Sentinels
// that watch them (quorum 2, a primary down after 1 s), each its own
// process on a loopback port with a data directory of its own. Sentinel
// is redis-server in sentinel mode (Debian's redis-sentinel is the same
// program). Its methods are safe for concurrent use.
type Sentinel struct {
	servers   []*Server // the primary at start, then the replica
	sentinels []*Server
	pass      string
	sentPass  string
}

// StartSentinel starts the servers and the Sentinels for tb (after
// Require), waits until the replica is in sync and every Sentinel knows
// the replica and the two other Sentinels (so that a failover can be
// agreed), and registers a tb.Cleanup that stops them all and removes
// their data. Failures are fatal.
func StartSentinel(tb testing.TB, cfg SentinelConfig) *Sentinel {
	tb.Helper()
	Require(tb)
	s := &Sentinel{pass: cfg.Password, sentPass: cfg.SentinelPassword}
	tb.Cleanup(s.stop)
	primary, err := launch(Config{Args: cfg.Args, Password: cfg.Password}, false)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	s.servers = append(s.servers, primary)
	_, port, _ := strings.Cut(primary.Addr(), ":")
	args := append(slices.Clone(cfg.Args), "--replicaof", "127.0.0.1", port)
	if cfg.Password != "" {
		args = append(args, "--masterauth", cfg.Password)
	}
	replica, err := launch(Config{Args: args, Password: cfg.Password}, false)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	s.servers = append(s.servers, replica)
	for range 3 {
		sn, err := launchSentinel(primary.Addr(), cfg)
		if err != nil {
			tb.Fatalf("%v", err)
		}
		s.sentinels = append(s.sentinels, sn)
	}
	if err := s.waitReady(); err != nil {
		tb.Fatalf("%v", err)
	}
	return s
}

// launchSentinel starts one Sentinel watching the primary at addr.
func launchSentinel(primary string, cfg SentinelConfig) (*Server, error) {
	host, port, _ := strings.Cut(primary, ":")
	conf := fmt.Sprintf("sentinel monitor %[1]s %s %s 2\nsentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 10000\nsentinel parallel-syncs %[1]s 1\n",
		SentinelMaster, host, port)
	if cfg.Password != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", SentinelMaster, cfg.Password)
	}
	if cfg.SentinelPassword != "" {
		conf += "requirepass " + cfg.SentinelPassword + "\n"
	}
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "sluice-redistest-sentinel-")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		// Sentinel rewrites its file as it learns the topology.
		path := filepath.Join(dir, "sentinel.conf")
		s := &Server{dir: dir, pass: cfg.SentinelPassword, pre: []string{path, "--sentinel"}, ready: "+monitor master"}
		if err = os.WriteFile(path, []byte(conf), 0o600); err == nil {
			if s.port, err = pickPort(false); err == nil {
				err = s.start()
			}
		}
		if err == nil {
			return s, nil
		}
		s.remove()
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return nil, err
		}
	}
}

// stop stops every process and removes the data directories.
func (s *Sentinel) stop() {
	for _, p := range append(slices.Clone(s.sentinels), s.servers...) {
		_ = p.Kill()
		p.remove()
	}
}

// waitReady waits until the replica is in sync and each Sentinel sees
// the replica and two other Sentinels.
func (s *Sentinel) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		err := s.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: Sentinel not ready within %v: %v", timeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sentinel) ready(ctx context.Context) error {
	rc := redis.NewClient(s.servers[1].Options())
	info, err := rc.Info(ctx, "replication").Result()
	rc.Close()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return errors.New("the replica is not in sync")
	}
	for _, sn := range s.sentinels {
		c := s.sentinelClient(sn)
		reps, err := c.Replicas(ctx, SentinelMaster).Result()
		var peers []map[string]string
		if err == nil {
			peers, err = c.Sentinels(ctx, SentinelMaster).Result()
		}
		c.Close()
		switch {
		case err != nil:
			return err
		case len(reps) != 1 || len(peers) != 2:
			return fmt.Errorf("Sentinel %s sees %d replicas and %d other Sentinels, want 1 and 2", sn.Addr(), len(reps), len(peers))
		}
	}
	return nil
}

func (s *Sentinel) sentinelClient(sn *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), Password: s.sentPass})
}

// SentinelAddrs returns the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		out[i] = sn.Addr()
	}
	return out
}

// URL returns the redis+sentinel:// URL of the primary: the servers'
// password, the Sentinels, the master's name and sentinel_password.
func (s *Sentinel) URL() string {
	u := "redis+sentinel://"
	if s.pass != "" {
		u += ":" + url.PathEscape(s.pass) + "@"
	}
	u += strings.Join(s.SentinelAddrs(), ",") + "/" + SentinelMaster
	if s.sentPass != "" {
		u += "?sentinel_password=" + url.QueryEscape(s.sentPass)
	}
	return u
}

// Servers returns the primary and the replica as started: after a
// failover the second may be the primary (Primary says).
func (s *Sentinel) Servers() []*Server { return slices.Clone(s.servers) }

// Primary returns the server that every Sentinel names the primary, and
// that says it is one, waiting up to 20 s for them to agree on one other
// than not (nil: any). Failures are fatal to tb.
func (s *Sentinel) Primary(tb testing.TB, not *Server) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		p, err := s.primary(ctx)
		if err == nil && p != not {
			return p
		}
		last = err
		select {
		case <-ctx.Done():
			tb.Fatalf("redistest: the Sentinels named no new primary within %v (last: %v)", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sentinel) primary(ctx context.Context) (*Server, error) {
	var named string
	for _, sn := range s.sentinels {
		if sn.PID() == 0 {
			continue
		}
		c := s.sentinelClient(sn)
		addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		c.Close()
		if err != nil {
			return nil, err
		}
		a := strings.Join(addr, ":")
		if named != "" && a != named {
			return nil, errors.New("the Sentinels disagree")
		}
		named = a
	}
	for _, srv := range s.servers {
		if srv.Addr() != named {
			continue
		}
		c := redis.NewClient(srv.Options())
		role, err := c.Do(ctx, "ROLE").Slice()
		c.Close()
		if err != nil {
			return nil, err
		}
		if len(role) == 0 || role[0] != "master" {
			return nil, errors.New(named + " is not a master yet")
		}
		return srv, nil
	}
	return nil, errors.New("the Sentinels name " + strconv.Quote(named) + ", none of the servers")
}

// Synced waits until the replica, as started, has every write the
// primary as started had when Synced was called (its replication
// offset), so that a test can kill the primary knowing what the replica
// holds. Call it before a failover. Failures are fatal to tb.
func (s *Sentinel) Synced(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	offset := func(srv *Server, field string) (int64, error) {
		c := redis.NewClient(srv.Options())
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
		return 0, errors.New("no " + field + " in INFO replication")
	}
	primary, replica := s.servers[0], s.servers[1]
	want, err := offset(primary, "master_repl_offset")
	if err != nil {
		tb.Fatalf("redistest: the primary's replication offset: %v", err)
	}
	for {
		got, err := offset(replica, "slave_repl_offset")
		if err == nil && got >= want {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("redistest: the replica did not reach offset %d within %v (at %d, %v)", want, timeout, got, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
