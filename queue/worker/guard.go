package worker

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// hostGuard refuses, on every endpoint, the requests that a web page in a
// browser could make to the worker: 421 for a Host it does not answer to
// (DNS rebinding), 403 for an Origin not its own (README.md, "Running a
// worker").
type hostGuard struct {
	exact map[string]bool // host:port, lower case
	names map[string]bool // host names allowed on any port, lower case
	next  http.Handler
}

// newHostGuard returns the guard of a worker that was told to listen on
// listen, listens on addr, and was given the AllowedHosts entries extra
// (allowedHosts). It answers to listen and addr, to localhost,
// 127.0.0.1 and [::1] on addr's port when addr is loopback or every
// address, and to extra: "name" for any port, "name:port" for that port.
func newHostGuard(listen string, addr net.Addr, extra []string, next http.Handler) *hostGuard {
	g := &hostGuard{exact: map[string]bool{}, names: map[string]bool{}, next: next}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		g.exact[strings.ToLower(listen)] = true
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		g.exact[strings.ToLower(tcp.String())] = true
		if tcp.IP.IsLoopback() || tcp.IP.IsUnspecified() {
			port := strconv.Itoa(tcp.Port)
			for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
				g.exact[net.JoinHostPort(h, port)] = true
			}
		}
	}
	for _, e := range extra {
		if hasPort(e) {
			g.exact[e] = true
		} else {
			g.names[strings.Trim(e, "[]")] = true
		}
	}
	return g
}

// allowedHosts checks Config.AllowedHosts and returns its entries, host
// names or host:port, trimmed and in lower case.
func allowedHosts(list []string) ([]string, error) {
	var hosts []string
	for _, e := range list {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if strings.ContainsAny(e, "/@?# ") || strings.HasSuffix(e, ":") {
			return nil, fmt.Errorf("AllowedHosts (-allowed-hosts): %.64q is not a host name or host:port", e)
		}
		hosts = append(hosts, e)
	}
	return hosts, nil
}

// hasPort reports whether hostport ends in a port.
func hasPort(hostport string) bool {
	_, port, err := net.SplitHostPort(hostport)
	return err == nil && port != ""
}

// allowed reports whether the worker answers to host, a Host field or
// the host of an Origin (a missing port is 80 for http, 443 for https).
func (g *hostGuard) allowed(host, defaultPort string) bool {
	host = strings.ToLower(host)
	if host == "" {
		return false
	}
	if !hasPort(host) {
		host = net.JoinHostPort(strings.Trim(host, "[]"), defaultPort)
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		return false
	}
	return g.exact[host] || g.names[name]
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.allowed(r.Host, "80") {
		http.Error(w, "sluice: this worker does not answer to that Host; see -allowed-hosts", http.StatusMisdirectedRequest)
		return
	}
	if origins, ok := r.Header["Origin"]; ok && !g.ownOrigin(origins) {
		http.Error(w, "sluice: requests from other origins are refused", http.StatusForbidden)
		return
	}
	g.next.ServeHTTP(w, r)
}

// ownOrigin reports whether an Origin field names one of the worker's
// own origins: http or https and a host it answers to, nothing more.
func (g *hostGuard) ownOrigin(values []string) bool {
	if len(values) != 1 {
		return false
	}
	scheme, host, _ := strings.Cut(strings.ToLower(values[0]), "://")
	port := map[string]string{"http": "80", "https": "443"}[scheme]
	return port != "" && !strings.ContainsAny(host, "/?#@ ") && g.allowed(host, port)
}

// minOperatorToken is the shortest Config.OperatorToken accepted.
const minOperatorToken = 16

// operatorGuard returns what wraps an operator endpoint (the page,
// /metrics, /monitoring/): with a token, it answers 401 with a JSON
// {"error","reason"} to a request that does not carry it, as a bearer
// token or as the password of basic authentication (which a browser
// asks for); without one, it leaves the endpoint open. The token is
// compared by its SHA-256, in constant time, so neither its bytes nor
// its length show in the time an answer takes.
func operatorGuard(token string) func(http.Handler) http.Handler {
	if token == "" {
		return func(h http.Handler) http.Handler { return h }
	}
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			given, ok := operatorCredential(r)
			got := sha256.Sum256([]byte(given))
			if ok && subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
				next.ServeHTTP(rw, r)
				return
			}
			reason, msg := "missing_token", "this endpoint needs the operator token: Authorization: Bearer <token>, or basic authentication with it as the password"
			if ok {
				reason, msg = "bad_token", "the operator token is not valid"
			}
			rw.Header().Set("WWW-Authenticate", `Basic realm="sluice operator", charset="UTF-8"`)
			rw.Header().Set("Content-Type", "application/json")
			rw.Header().Set("Cache-Control", "no-store")
			rw.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(rw).Encode(struct {
				Error  string `json:"error"`
				Reason string `json:"reason"`
			}{msg, reason})
		})
	}
}

// operatorCredential returns the token r carries, as a bearer token or a
// basic password, and whether it carries one.
func operatorCredential(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, cred, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(cred), true
}
