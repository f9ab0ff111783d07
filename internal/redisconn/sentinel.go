package redisconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/urlerr"
)

// Sentinel URL schemes: a Redis whose primary Redis Sentinel names, over
// plain TCP or TLS.
const (
	SentinelScheme    = "redis+sentinel"
	SentinelTLSScheme = "rediss+sentinel"
)

// IsSentinel reports whether raw is a Sentinel URL (redis+sentinel:// or
// rediss+sentinel://).
func IsSentinel(raw string) bool {
	scheme, _, _ := strings.Cut(raw, "://")
	scheme = strings.ToLower(scheme)
	return scheme == SentinelScheme || scheme == SentinelTLSScheme
}

const sentinelWant = "want redis+sentinel://[user:password@]host:port[,host:port...]/master[?db=N&sentinel_password=...&sentinel_username=...], or rediss+sentinel:// for TLS"

// parseSentinel reads a Sentinel URL:
//
//	redis+sentinel://[user:password@]host1:port,host2:port/master?db=0&sentinel_password=...
//
// The hosts are Sentinels; user and password are the primary's and its
// replicas' (AUTH); sentinel_username and sentinel_password, percent-
// encoded, the Sentinels' own; db the database. rediss+sentinel speaks
// TLS (at least 1.2) to Sentinels and servers alike, each checked by the
// name it is dialled by. Its errors leave the URL out.
func parseSentinel(raw string) (*redis.FailoverOptions, error) {
	bad := func(format string, args ...any) (*redis.FailoverOptions, error) {
		return nil, fmt.Errorf("-redis: "+format+"; "+sentinelWant, args...)
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	o := &redis.FailoverOptions{}
	if strings.EqualFold(scheme, SentinelTLSScheme) {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	// The userinfo ends at the last "@" before the path: a password
	// may hold "@" (percent-encoded or not), not "/", "?" or "#".
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		var err1, err2 error
		o.Username, err1 = url.PathUnescape(user)
		if hasPass {
			o.Password, err2 = url.PathUnescape(pass)
		}
		if err1 != nil || err2 != nil {
			return bad("the user or password is not percent-encoded properly")
		}
		authority = authority[at+1:]
	}
	for _, h := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(strings.TrimSpace(h))
		if err != nil || host == "" {
			return bad("a Sentinel's address is not host:port")
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return bad("a Sentinel's port is not a number")
		}
		o.SentinelAddrs = append(o.SentinelAddrs, net.JoinHostPort(host, port))
	}
	u, err := url.Parse("x://h" + tail)
	if err != nil {
		return bad("the path or query does not parse (%s)", urlerr.Reason(err))
	}
	if u.Fragment != "" {
		return bad("a fragment (#) is not part of it")
	}
	o.MasterName = strings.Trim(u.Path, "/")
	if o.MasterName == "" || strings.Contains(o.MasterName, "/") {
		return bad("the path must be the master's name, as Sentinel's configuration has it")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("the query does not parse (%s)", urlerr.Reason(err))
	}
	for name, v := range q {
		if len(v) != 1 {
			return bad("%.32q is given %d times", name, len(v))
		}
		switch name {
		case "db":
			if o.DB, err = strconv.Atoi(v[0]); err != nil || o.DB < 0 {
				return bad("db is not a database number")
			}
		case "sentinel_password":
			o.SentinelPassword = v[0]
		case "sentinel_username":
			o.SentinelUsername = v[0]
		default:
			return bad("unknown option %.32q", name)
		}
	}
	return o, nil
}

// errSentinelCluster is Client's error for a Sentinel URL with a cluster.
var errSentinelCluster = errors.New("-redis is a Sentinel URL and -redis-cluster is set: Sentinel names one primary, a cluster many; choose one")
