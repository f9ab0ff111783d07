// Package urlerr says why a URL did not parse without quoting any of it.
//
// net/url's errors quote the whole URL, or the text around the fault, and
// that text may be a password: in redis://:pa/ss@host:6379 the "/" ends
// the authority early, so url.Parse takes ":pa" for a port and reports
// `invalid port ":pa" after host`. Reason keeps the kind of fault and
// drops every quoted part.
package urlerr

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// quoted matches a Go-quoted string (%q), escapes included.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// Reason returns err's text without the URL or any quoted part of it:
// for a *url.Error its inner error only ("invalid port after host",
// "invalid URL escape", "invalid character in host name", "missing
// protocol scheme"), and for any other error its text with every quoted
// string removed.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	msg := quoted.ReplaceAllString(err.Error(), "")
	return strings.Join(strings.Fields(msg), " ")
}
