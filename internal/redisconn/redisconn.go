// Package redisconn turns the Redis flags that the worker and the enqueue
// CLI share (-redis, -redis-cluster, -redis-ca) into a go-redis client:
// standalone, cluster, or a failover client of Redis Sentinel.
//
// Errors never quote the URL: it may hold a password.
package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/urlerr"
)

// Flags are the connection settings of a command.
type Flags struct {
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS;
	// or redis+sentinel://[user:password@]host:port,.../master?db=N&
	// sentinel_password=... (rediss+sentinel:// for TLS) for a primary
	// that Redis Sentinel names. With Cluster it gives only the
	// credentials and TLS.
	URL string
	// Cluster is a comma-separated list of Redis Cluster addresses.
	Cluster string
	// CAFile is a PEM file of the certificate authorities to trust for
	// rediss:// instead of the system's.
	CAFile string
}

// NotConfigured is what the worker and the enqueue CLI say when no Redis
// is named.
const NotConfigured = "no Redis configured: set -redis or SLUICE_REDIS_URL (or -redis-cluster)"

// Configured reports whether any Redis was named.
func (f Flags) Configured() bool { return f.URL != "" || f.Cluster != "" }

// Client builds the client the flags describe; it does not connect. A
// Sentinel URL (redis+sentinel://, rediss+sentinel://) gives a failover
// client, a *redis.Client that follows the primary Sentinel names.
func (f Flags) Client() (redis.UniversalClient, error) {
	if IsSentinel(f.URL) {
		if f.Cluster != "" {
			return nil, errSentinelCluster
		}
		fo, err := parseSentinel(f.URL)
		if err != nil {
			return nil, err
		}
		if err := f.trust(fo.TLSConfig); err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(fo), nil
	}
	var o *redis.Options
	if f.URL != "" {
		var err error
		if o, err = parse(f.URL); err != nil {
			return nil, err
		}
	}
	if f.CAFile != "" {
		if o == nil {
			return nil, errors.New("-redis-ca is set but -redis is not a rediss:// URL")
		}
		if err := f.trust(o.TLSConfig); err != nil {
			return nil, err
		}
	}
	if f.Cluster != "" {
		opts := &redis.ClusterOptions{Addrs: strings.FieldsFunc(f.Cluster, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })}
		if len(opts.Addrs) == 0 {
			return nil, errors.New("-redis-cluster: no address")
		}
		if o != nil {
			opts.Username, opts.Password, opts.TLSConfig = o.Username, o.Password, o.TLSConfig
		}
		return redis.NewClusterClient(opts), nil
	}
	if o == nil {
		return nil, errors.New("no Redis: set -redis or -redis-cluster")
	}
	return redis.NewClient(o), nil
}

// trust makes c trust the CAs of f.CAFile, if any; c is nil for a URL
// without TLS.
func (f Flags) trust(c *tls.Config) error {
	if f.CAFile == "" {
		return nil
	}
	if c == nil {
		return errors.New("-redis-ca is set but -redis is not a rediss:// URL (or rediss+sentinel://)")
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return fmt.Errorf("-redis-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("-redis-ca: no PEM certificate in %s", f.CAFile)
	}
	c.RootCAs = pool
	return nil
}

// parse is redis.ParseURL with errors that leave the URL out.
func parse(raw string) (*redis.Options, error) {
	const want = "want redis://[user:password@]host:port/db, or rediss:// for TLS"
	u, err := url.Parse(raw)
	if err != nil {
		// Its errors quote the URL, or a password taken for a port.
		return nil, fmt.Errorf("-redis: the URL does not parse (%s); %s", urlerr.Reason(err), want)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := err.Error()
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		return nil, fmt.Errorf("-redis: %s; %s", msg, want)
	}
	return o, nil
}
