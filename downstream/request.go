package downstream

import (
	"errors"
	"strings"
)

// HTTPMethods are the methods a sluice.http job may use. TRACE and
// CONNECT, and anything else, are refused: they are no call to an API.
var HTTPMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Errors of CheckRequest. They name what is wrong, never the header's
// name or value, which may be a secret.
var (
	ErrMethodNotAllowed = errors.New("method is not one of " + strings.Join(HTTPMethods, ", "))
	ErrHeaderName       = errors.New("a header name is not a token (letters, digits and !#$%&'*+-.^_`|~)")
	ErrHeaderValue      = errors.New("a header value holds a control character (CR, LF, NUL, or another but tab)")
)

// CheckRequest refuses the method and header fields of a sluice.http
// request that net/http could never send: a method outside HTTPMethods
// ("" is GET), a header name that is not an RFC 9110 token, or a header
// value with a control character other than tab. Such a job can never
// succeed, so it is refused at enqueue (the policy's job check) and
// archived without a retry by the worker.
func CheckRequest(method string, header map[string]string) error {
	if method != "" && !allowedMethod(method) {
		return ErrMethodNotAllowed
	}
	for name, value := range header {
		if !isToken(name) {
			return ErrHeaderName
		}
		if !validValue(value) {
			return ErrHeaderValue
		}
	}
	return nil
}

func allowedMethod(m string) bool {
	for _, a := range HTTPMethods {
		if m == a {
			return true
		}
	}
	return false
}

// isToken reports whether s is an RFC 9110 token: one or more of
// letters, digits and !#$%&'*+-.^_`|~.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue reports whether net/http sends s as a header value: no
// control character but tab (no CR, LF, NUL, DEL).
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
