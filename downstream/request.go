package downstream

import (
	"errors"
	"slices"
	"strings"
)

// HTTPMethods are the methods a sluice.http job may use. TRACE and
// CONNECT, and anything else, are refused: they are no call to an API.
var HTTPMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Errors of CheckRequest. They name what is wrong, never the header's
// name or value, which may be a secret.
var (
	ErrMethodNotAllowed = errors.New("method is not one of " + strings.Join(HTTPMethods, ", "))
	ErrHeaderName       = errors.New("a header name is not a token (letters, digits and " + tokenMarks + ")")
	ErrHeaderValue      = errors.New("a header value holds a control character (CR, LF, NUL, or another but tab)")
)

// tokenMarks are the characters of an RFC 9110 token besides letters and
// digits.
const tokenMarks = "!#$%&'*+-.^_`|~"

// CheckRequest refuses the method and header fields of a sluice.http
// request that net/http could never send: a method outside HTTPMethods
// ("" is GET), a header name that is not an RFC 9110 token, or a header
// value with a control character other than tab. Such a job can never
// succeed, so it is refused at enqueue (the policy's job check) and
// archived without a retry by the worker.
func CheckRequest(method string, header map[string]string) error {
	if method != "" && !slices.Contains(HTTPMethods, method) {
		return ErrMethodNotAllowed
	}
	notToken := func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(tokenMarks, r))
	}
	for name, value := range header {
		if name == "" || strings.ContainsFunc(name, notToken) {
			return ErrHeaderName
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return ErrHeaderValue
		}
	}
	return nil
}
