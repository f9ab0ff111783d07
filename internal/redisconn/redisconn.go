// Package redisconn turns the Redis flags that the worker and the enqueue
// CLI share (-redis, -redis-cluster, -redis-ca) into a go-redis client.
//
// Errors never quote the URL: it may hold a password.
package redisconn

import (
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
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS.
	// With Cluster it gives only the credentials and TLS.
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

// Client builds the client the flags describe; it does not connect.
func (f Flags) Client() (redis.UniversalClient, error) {
	var o *redis.Options
	if f.URL != "" {
		var err error
		if o, err = parse(f.URL); err != nil {
			return nil, err
		}
	}
	if f.CAFile != "" {
		if o == nil || o.TLSConfig == nil {
			return nil, errors.New("-redis-ca is set but -redis is not a rediss:// URL")
		}
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("-redis-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-ca: no PEM certificate in %s", f.CAFile)
		}
		o.TLSConfig.RootCAs = pool
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
