package redisconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestErrorsLeaveThePasswordOut(t *testing.T) {
	const pass = "s3cret-Pw"
	for _, u := range []string{
		"redis://:" + pass + "@127.0.0.1:63x79/0",   // not a port
		"redis://:" + pass + "@127.0.0.1:6379/zero", // not a db
		"http://:" + pass + "@127.0.0.1:6379/0",     // not redis
		"redis://:" + pass + "@127.0.0.1:6379/0?dial_timeout=soon",
		// A "/", "?" or "#" in the password ends the authority early:
		// net/url takes the password for a port and quotes it.
		"redis://:" + pass + "/x@127.0.0.1:6393/0",
		"redis://:" + pass + "?x@127.0.0.1:6393/0",
		"redis://:" + pass + "#x@127.0.0.1:6393/0",
		"redis://user:" + pass + "/x@127.0.0.1:6393/0",
		"redis://" + pass + "{/x@127.0.0.1:6393/0",
	} {
		_, err := Flags{URL: u}.Client()
		if err == nil {
			t.Errorf("%q: accepted", u)
			continue
		}
		if strings.Contains(err.Error(), pass) {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "-redis: ") || !strings.Contains(err.Error(), "rediss://") {
			t.Errorf("%v: want it to name -redis and the expected form", err)
		}
	}
}

func TestClients(t *testing.T) {
	c, err := Flags{URL: "redis://u:p@127.0.0.1:1/2"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	o := c.(*redis.Client).Options()
	if o.Username != "u" || o.Password != "p" || o.DB != 2 || o.TLSConfig != nil {
		t.Errorf("options %+v", o)
	}
	c.Close()

	cc, err := Flags{URL: "rediss://:p@ignored:1", Cluster: " 127.0.0.1:1, ,127.0.0.1:2"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	co := cc.(*redis.ClusterClient).Options()
	// redis.ParseURL gives rediss:// a TLS 1.2 floor; the cluster keeps it.
	if len(co.Addrs) != 2 || co.Password != "p" || co.TLSConfig == nil || co.TLSConfig.MinVersion == 0 {
		t.Errorf("cluster options %+v", co)
	}
	cc.Close()

	for _, f := range []Flags{{}, {Cluster: " , "}} {
		if _, err := f.Client(); err == nil {
			t.Errorf("%+v: accepted", f)
		}
	}
}

func TestCAFile(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Flags
		want string
	}{
		{Flags{URL: "redis://127.0.0.1:1", CAFile: notPEM}, "not a rediss:// URL"},
		{Flags{Cluster: "127.0.0.1:1", CAFile: notPEM}, "not a rediss:// URL"},
		{Flags{URL: "rediss://127.0.0.1:1", CAFile: filepath.Join(dir, "missing.pem")}, "-redis-ca: open"},
		{Flags{URL: "rediss://127.0.0.1:1", CAFile: notPEM}, "no PEM certificate"},
	} {
		_, err := tc.f.Client()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.f, err, tc.want)
		}
	}
	// A good CA file is exercised end to end by internal/e2e's
	// TestSecurityRedisTLS, against a TLS redis-server.
}
