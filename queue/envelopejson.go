package queue

import (
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeEnvelopeFast decodes an envelope written as encode writes it, a
// compact JSON object of envelope's own keys, into e, which must be zero,
// faster than encoding/json (which the worker paid for on every job). It
// reports false for anything else: whitespace, a string with an escape or
// a control character or bytes that are not UTF-8, a key in another case
// or unknown, null, a number with a fraction or an exponent, or a value
// encoding/json would refuse; decodeJob then decodes with encoding/json,
// so that every text means what encoding/json makes of it. Where it
// reports true, e holds what json.Unmarshal gives (a key given twice: the
// last, as there).
func decodeEnvelopeFast(s []byte, e *envelope) bool {
	d := envDecoder{s: s}
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return d.i == len(s)
	}
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') || !d.field(key, e) {
			return false
		}
		if d.byte('}') {
			return d.i == len(s)
		}
		if !d.byte(',') {
			return false
		}
	}
}

// envDecoder reads s from i.
type envDecoder struct {
	s []byte
	i int
}

// byte consumes c if it comes next.
func (d *envDecoder) byte(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string without escapes, whose bytes are UTF-8 and none a
// control character, and returns its contents (a view of s).
func (d *envDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start, ascii := d.i, true
	for ; d.i < len(d.s); d.i++ {
		switch c := d.s[d.i]; {
		case c == '"':
			v := d.s[start:d.i]
			d.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// int reads an integer as JSON writes one: -?(0|[1-9][0-9]*), within
// bits.
func (d *envDecoder) int(bits int) (int64, bool) {
	start := d.i
	d.byte('-')
	digits := d.i
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || d.s[digits] == '0' && d.i-digits > 1 {
		return 0, false
	}
	if d.i < len(d.s) && (d.s[d.i] == '.' || d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		return 0, false
	}
	// At most bits, as strconv.ParseInt would take it, without a string.
	limit := uint64(1)<<(bits-1) - 1
	if d.s[start] == '-' {
		limit++
	}
	var n uint64
	for _, c := range d.s[digits:d.i] {
		if n > (limit-uint64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if d.s[start] == '-' {
		return -int64(n), true
	}
	return int64(n), true
}

// time reads a quoted time as time.Time's UnmarshalJSON does.
func (d *envDecoder) time(t *time.Time) bool {
	start := d.i
	if _, ok := d.str(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.s[start:d.i]) == nil
}

// bytes reads base64 as encoding/json reads a []byte.
func (d *envDecoder) bytes() ([]byte, bool) {
	v, ok := d.str()
	if !ok {
		return nil, false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
	n, err := base64.StdEncoding.Decode(b, v)
	return b[:n], err == nil
}

// bool reads true or false.
func (d *envDecoder) bool() (bool, bool) {
	rest := d.s[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		d.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		d.i += 5
		return false, true
	}
	return false, false
}

// field reads the value of key into e.
func (d *envDecoder) field(key []byte, e *envelope) bool {
	var ok bool
	text := func(p *string) {
		var v []byte
		if v, ok = d.str(); ok {
			*p = string(v)
		}
	}
	integer := func(p *int) {
		var n int64
		if n, ok = d.int(strconv.IntSize); ok {
			*p = int(n)
		}
	}
	switch string(key) {
	case "id":
		text(&e.ID)
	case "tenant":
		text(&e.Tenant)
	case "type":
		text(&e.Type)
	case "payload":
		e.Payload, ok = d.bytes()
	case "downstream":
		text(&e.Downstream)
	case "cost":
		e.Cost, ok = d.int(64)
	case "units":
		e.Units, ok = d.int(64)
	case "max_retry":
		integer(&e.MaxRetry)
	case "timeout":
		var n int64
		n, ok = d.int(64)
		e.Timeout = time.Duration(n)
	case "run_at":
		ok = d.time(&e.RunAt)
	case "nonce":
		text(&e.Nonce)
	case "enqueued_at":
		ok = d.time(&e.EnqueuedAt)
	case "retried":
		integer(&e.Retried)
	case "moves":
		integer(&e.Moves)
	case "refused":
		integer(&e.Refused)
	case "class":
		text(&e.Class)
	case "id_recorded":
		e.IDRecorded, ok = d.bool()
	}
	return ok
}
