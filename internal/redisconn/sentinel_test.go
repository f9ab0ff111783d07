package redisconn

import (
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestSentinelURLs: what a Sentinel URL gives, and the ones refused,
// whose errors leave the password out.
func TestSentinelURLs(t *testing.T) {
	o, err := parseSentinel("redis+sentinel://app:p%40ss@10.0.0.1:26379, s2.internal:26380,[::1]:26381/queue-primary?db=3&sentinel_password=sp%26w&sentinel_username=watch")
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "queue-primary" || !slices.Equal(o.SentinelAddrs, []string{"10.0.0.1:26379", "s2.internal:26380", "[::1]:26381"}) ||
		o.Username != "app" || o.Password != "p@ss" || o.DB != 3 || o.SentinelPassword != "sp&w" || o.SentinelUsername != "watch" || o.TLSConfig != nil {
		t.Errorf("options %+v", o)
	}
	o, err = parseSentinel("rediss+sentinel://:pw@s1:26379/m")
	if err != nil {
		t.Fatal(err)
	}
	if o.TLSConfig == nil || o.TLSConfig.MinVersion == 0 || o.Password != "pw" || o.DB != 0 {
		t.Errorf("TLS options %+v", o)
	}

	const pass = "s3cret-Pw"
	for _, c := range []struct{ url, says string }{
		{"redis+sentinel://:" + pass + "@s1:26379", "the master's name"},
		{"redis+sentinel://:" + pass + "@s1:26379/", "the master's name"},
		{"redis+sentinel://:" + pass + "@s1:26379/a/b", "the master's name"},
		{"redis+sentinel://:" + pass + "@s1/m", "not host:port"},
		{"redis+sentinel://:" + pass + "@s1:x/m", "not a number"},
		{"redis+sentinel://:" + pass + "@s1:1,/m", "not host:port"},
		{"redis+sentinel://:" + pass + "@s1:1/m?db=x", "db is not"},
		{"redis+sentinel://:" + pass + "@s1:1/m?db=1&db=2", "given 2 times"},
		{"redis+sentinel://:" + pass + "@s1:1/m?master_name=x", "unknown option"},
		{"redis+sentinel://:" + pass + "%zz@s1:1/m", "percent-encoded"},
		{"redis+sentinel://:" + pass + "@s1:1/m#x", "fragment"},
	} {
		_, err := Flags{URL: c.url}.Client()
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "redis+sentinel://[user") || strings.Contains(err.Error(), pass) {
			t.Errorf("%s: %v; want an error saying %q without the password", c.url, err, c.says)
		}
	}
	if _, err := (Flags{URL: "redis+sentinel://s1:1/m", Cluster: "c:1"}).Client(); err == nil {
		t.Error("a Sentinel URL and a cluster: accepted")
	}
	if _, err := (Flags{URL: "redis+sentinel://s1:1/m", CAFile: "ca.pem"}).Client(); err == nil || !strings.Contains(err.Error(), "not a rediss://") {
		t.Errorf("-redis-ca without TLS: %v", err)
	}
	c, err := Flags{URL: "REDIS+SENTINEL://s1:1/m"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.Client); !ok {
		t.Errorf("a Sentinel URL gives a %T, want the failover *redis.Client", c)
	}
}
