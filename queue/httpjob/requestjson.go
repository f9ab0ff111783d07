package httpjob

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeRequestFast decodes a payload that is one JSON object of
// Request's keys, each at most once and in its own case, with string
// values (an object of strings for header), into req, which must be zero,
// faster than encoding/json (which the worker paid for on every job). It
// reports false for anything else (an unknown or repeated key, null, a
// value of another type, text after the object), and ParseRequest then
// decodes with encoding/json, so that every payload means what
// encoding/json makes of it. A value with an escape, or bytes that are
// not UTF-8, is read by encoding/json itself; a key with one is left to
// it with the payload.
func decodeRequestFast(s []byte, req *Request) bool {
	d := reqDecoder{s: s}
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return d.end()
	}
	var seen [4]bool
	for {
		key, ok := d.raw()
		if !ok || !d.byte(':') {
			return false
		}
		i := -1
		switch string(key) {
		case "method":
			i, ok = 0, d.into(&req.Method)
		case "url":
			i, ok = 1, d.into(&req.URL)
		case "header":
			i, ok = 2, d.header(req)
		case "body":
			i, ok = 3, d.into(&req.Body)
		}
		if i < 0 || !ok || seen[i] {
			return false
		}
		seen[i] = true
		if d.byte('}') {
			return d.end()
		}
		if !d.byte(',') {
			return false
		}
	}
}

// reqDecoder reads s from i.
type reqDecoder struct {
	s []byte
	i int
}

// space skips JSON whitespace.
func (d *reqDecoder) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c, after whitespace, if it comes next.
func (d *reqDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (d *reqDecoder) end() bool {
	d.space()
	return d.i == len(d.s)
}

// raw reads a string without escapes that is UTF-8, and returns its
// contents (a view of s): a key, matched without a copy.
func (d *reqDecoder) raw() ([]byte, bool) {
	v, plain, ok := d.scan()
	return v, ok && plain
}

// str reads a string: itself when it has no escape and is UTF-8, else by
// encoding/json.
func (d *reqDecoder) str() (string, bool) {
	start := d.i
	v, plain, ok := d.scan()
	switch {
	case !ok:
		return "", false
	case plain:
		return string(v), true
	}
	var out string
	err := json.Unmarshal(d.s[start:d.i], &out)
	return out, err == nil
}

// scan reads a string's extent, and reports whether its contents, v, are
// plain: no escape, and UTF-8.
func (d *reqDecoder) scan() (v []byte, plain, ok bool) {
	if !d.byte('"') {
		return nil, false, false
	}
	start, plain := d.i, true
	for ; d.i < len(d.s); d.i++ {
		switch c := d.s[d.i]; {
		case c == '"':
			d.i++
			v := d.s[start : d.i-1]
			return v, plain && utf8.Valid(v), true
		case c == '\\':
			plain = false
			d.i++ // the escaped byte cannot end the string
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

// into reads a string into p.
func (d *reqDecoder) into(p *string) bool {
	v, ok := d.str()
	*p = v
	return ok
}

// header reads an object of strings into req.Header.
func (d *reqDecoder) header(req *Request) bool {
	if !d.byte('{') {
		return false
	}
	req.Header = map[string]string{}
	if d.byte('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		v, ok := d.str()
		if !ok {
			return false
		}
		req.Header[k] = v
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}
