package worker

import (
	"cmp"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Flags are cmd/worker's command-line flags, bound to a flag.FlagSet by
// NewFlags: a program that runs a Worker gets the same flags and
// environment variables as the worker command, and may add its own to
// the set.
type Flags struct {
	cfg          Config
	allowedHosts string
	readOnly     bool
}

// NewFlags defines the worker's flags on fs, each with its environment
// variable (read through getenv, os.Getenv in a command; nil reads none)
// as its default, and returns them; call Config once fs is parsed.
// README.md, "Running a worker", lists them.
func NewFlags(fs *flag.FlagSet, getenv func(string) string) *Flags {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	envBool := func(name string) bool { // unset or not a boolean: false
		v, _ := strconv.ParseBool(getenv(name))
		return v
	}
	f := &Flags{}
	c := &f.cfg
	fs.StringVar(&c.RedisURL, "redis", getenv("SLUICE_REDIS_URL"), "Redis URL: redis://[user:pass@]host:port/db, or rediss:// for TLS; redis+sentinel://[user:pass@]host:port,host:port/master?db=0&sentinel_password=... (rediss+sentinel:// for TLS) for a primary Redis Sentinel names; \"embedded\" starts an in-memory Redis whose jobs are lost on exit (env SLUICE_REDIS_URL)")
	fs.BoolVar(&c.AllowEvictingRedis, "allow-evicting-redis", envBool("SLUICE_ALLOW_EVICTING_REDIS"), "run on a Redis whose maxmemory-policy may evict keys, which loses jobs when it is full; warns, and sets sluice_redis_evicting (env SLUICE_ALLOW_EVICTING_REDIS)")
	fs.DurationVar(&c.RedisCheckEvery, "redis-check-every", defaultRedisCheckEvery, "how often the worker checks that Redis kept its data (a marker key) and reads its memory use")
	fs.StringVar(&c.RedisCAFile, "redis-ca", getenv("SLUICE_REDIS_CA"), "PEM file of the CAs to trust for rediss:// instead of the system's (env SLUICE_REDIS_CA)")
	fs.StringVar(&c.RedisCluster, "redis-cluster", getenv("SLUICE_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses; -redis then only gives credentials and TLS (env SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&c.PolicyFile, "policy", getenv("SLUICE_POLICY"), "policy file (YAML): queue, downstreams, tenants; see docs/policy.md (env SLUICE_POLICY)")
	fs.StringVar(&c.Listen, "listen", cmp.Or(getenv("SLUICE_LISTEN"), defaultListen), "address of the sluice page (/), /metrics, /healthz and POST /enqueue; loopback unless you mean it (env SLUICE_LISTEN)")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", getenv("SLUICE_ALLOWED_HOSTS"), "comma-separated Host names the HTTP endpoints answer to besides the listen address (and localhost, 127.0.0.1, [::1] on a loopback or all-addresses listener): name for any port, name:port for one (env SLUICE_ALLOWED_HOSTS)")
	fs.IntVar(&c.Concurrency, "concurrency", defaultConcurrency, "jobs this process runs at once")
	fs.IntVar(&c.KeyShare, "key-share", 0, "the most goroutines one downstream (or downstream/tenant) holds while others have work; 0: a quarter of -concurrency")
	fs.Float64Var(&c.Fallback, "fallback", 0, "share of each downstream's rate this process may use on its own while Redis is unreachable; 0 fails closed")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long SIGTERM lets running jobs finish")
	fs.BoolVar(&c.EnqueueKeys, "enqueue-keys", envBool("SLUICE_ENQUEUE_KEYS"), "POST /enqueue takes only callers with an API key of the queue, the job's tenant the key's; manage keys with \"enqueue keys\" (env SLUICE_ENQUEUE_KEYS)")
	fs.StringVar(&c.OperatorToken, "operator-token", getenv("SLUICE_OPERATOR_TOKEN"), "token required on the page (/), /metrics and /monitoring/ (bearer, or a basic-auth password), at least 16 bytes; prefer the environment variable, a flag shows in ps (env SLUICE_OPERATOR_TOKEN)")
	fs.BoolVar(&f.readOnly, "monitor-read-only", true, "serve asynqmon's UI at /monitoring/ read-only (false lets it delete and retry tasks)")
	return f
}

// Config returns the Config the parsed flags give, Logger and Registry
// unset. A value the flags refuse that Config would take as its default
// (a zero -concurrency) is an error naming the flag; the rest New checks.
func (f *Flags) Config() (*Config, error) {
	c := f.cfg
	switch {
	case c.Concurrency < 1:
		return nil, fmt.Errorf("-concurrency must be at least 1, got %d", c.Concurrency)
	case c.RedisCheckEvery <= 0:
		return nil, fmt.Errorf("-redis-check-every must be above 0, got %v", c.RedisCheckEvery)
	case c.ShutdownTimeout <= 0:
		return nil, fmt.Errorf("-shutdown-timeout must be above 0, got %v", c.ShutdownTimeout)
	}
	c.AllowedHosts = strings.Split(f.allowedHosts, ",")
	hosts, err := allowedHosts(c.AllowedHosts)
	if err != nil {
		return nil, err
	}
	c.AllowedHosts, c.MonitorWritable = hosts, !f.readOnly
	return &c, nil
}
