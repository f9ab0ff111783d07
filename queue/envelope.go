package queue

import (
	"encoding/base64"
	"strconv"
	"time"
)

// parseEnvelope decodes into j, which must be zero, an envelope of the
// shape encode writes: compact JSON, one object of the Job's own field
// names, strings of printable ASCII without escapes, integers. It returns
// false at the first thing outside that shape, leaving j partly set, and
// the caller then decodes the whole envelope with encoding/json. For every
// input it accepts it sets j exactly as json.Unmarshal would
// (FuzzParseEnvelope holds the two equal).
//
// It exists because a worker decodes one envelope per job, and in the
// queue benchmark's profile encoding/json's share of that was nine tenths
// of the time sluice's own code added to asynq's per job. This is about
// 2.5 times faster on the benchmark's envelopes (BenchmarkDecodeJob).
func parseEnvelope(s []byte, j *Job) bool {
	if len(s) < 2 || s[0] != '{' {
		return false
	}
	if s[1] == '}' {
		return len(s) == 2
	}
	i := 1
	for {
		k, n, ok := plainString(s, i)
		if !ok || n >= len(s) || s[n] != ':' {
			return false
		}
		i = n + 1
		switch string(k) {
		case "id", "nonce", "tenant", "type", "downstream", "class":
			v, n, ok := plainString(s, i)
			if !ok {
				return false
			}
			i = n
			switch string(k) {
			case "id":
				j.ID = string(v)
			case "nonce":
				j.Nonce = string(v)
			case "tenant":
				j.Tenant = string(v)
			case "type":
				j.Type = string(v)
			case "downstream":
				j.Downstream = string(v)
			default:
				j.Class = string(v)
			}
		case "payload":
			v, n, ok := plainString(s, i)
			if !ok {
				return false
			}
			b := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
			m, err := base64.StdEncoding.Decode(b, v)
			if err != nil {
				return false
			}
			j.Payload, i = b[:m], n
		case "enqueued_at":
			_, n, ok := plainString(s, i)
			if !ok || j.EnqueuedAt.UnmarshalJSON(s[i:n]) != nil {
				return false
			}
			i = n
		case "cost", "max_retry", "timeout", "retried", "moves":
			v, n, ok := plainInt(s, i)
			if !ok {
				return false
			}
			i = n
			switch string(k) {
			case "cost":
				j.Cost = v
			case "max_retry":
				j.MaxRetry = int(v)
			case "timeout":
				j.Timeout = time.Duration(v)
			case "retried":
				j.Retried = int(v)
			default:
				j.Moves = int(v)
			}
		default:
			return false
		}
		if i >= len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i++
		case '}':
			return i+1 == len(s)
		default:
			return false
		}
	}
}

// plainString reads the JSON string that starts at s[i] if it holds only
// printable ASCII and no escapes: its contents, and the index after its
// closing quote.
func plainString(s []byte, i int) (v []byte, next int, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return nil, 0, false
	}
	for e := i + 1; e < len(s); e++ {
		switch c := s[e]; {
		case c == '"':
			return s[i+1 : e], e + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainInt reads the JSON integer that starts at s[i] (no fraction or
// exponent, at most 18 digits, so it cannot overflow) and the index after
// it.
func plainInt(s []byte, i int) (v int64, next int, ok bool) {
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	start := i
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int64(s[i]-'0')
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && s[start] == '0') {
		return 0, 0, false
	}
	if neg {
		v = -v
	}
	return v, i, true
}

// appendEnvelope appends the job's envelope, byte for byte what
// json.Marshal writes for it, when every string of the job is plain (see
// plainJSON) and its enqueue time one that encoding/json accepts; it
// returns false otherwise, and the caller uses json.Marshal. It is the
// writing half of parseEnvelope: each Enqueue writes one envelope, and
// encoding/json's reflection took about 2 µs of the producer's time of
// it (BenchmarkEnvelope). FuzzAppendEnvelope holds the two equal.
func (j *Job) appendEnvelope(b []byte) ([]byte, bool) {
	if !plainJSON(j.ID) || !plainJSON(j.Nonce) || !plainJSON(j.Tenant) || !plainJSON(j.Type) ||
		!plainJSON(j.Downstream) || !plainJSON(j.Class) {
		return b, false
	}
	if y := j.EnqueuedAt.Year(); y < 0 || y > 9999 {
		return b, false
	}
	str := func(b []byte, key, v string) []byte {
		b = append(b, key...)
		b = append(b, v...)
		return append(b, '"')
	}
	num := func(b []byte, key string, v int64) []byte {
		return strconv.AppendInt(append(b, key...), v, 10)
	}
	b = str(b, `{"id":"`, j.ID)
	if j.Nonce != "" {
		b = str(b, `,"nonce":"`, j.Nonce)
	}
	b = str(b, `,"tenant":"`, j.Tenant)
	b = str(b, `,"type":"`, j.Type)
	if len(j.Payload) > 0 {
		b = append(b, `,"payload":"`...)
		b = base64.StdEncoding.AppendEncode(b, j.Payload)
		b = append(b, '"')
	}
	if j.Downstream != "" {
		b = str(b, `,"downstream":"`, j.Downstream)
	}
	if j.Cost != 0 {
		b = num(b, `,"cost":`, j.Cost)
	}
	if j.MaxRetry != 0 {
		b = num(b, `,"max_retry":`, int64(j.MaxRetry))
	}
	if j.Timeout != 0 {
		b = num(b, `,"timeout":`, int64(j.Timeout))
	}
	b = append(b, `,"enqueued_at":"`...)
	b = j.EnqueuedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if j.Retried != 0 {
		b = num(b, `,"retried":`, int64(j.Retried))
	}
	if j.Moves != 0 {
		b = num(b, `,"moves":`, int64(j.Moves))
	}
	if j.Class != "" {
		b = str(b, `,"class":"`, j.Class)
	}
	return append(b, '}'), true
}

// plainJSON reports whether encoding/json writes s as it is between
// quotes: printable ASCII without the characters it escapes (the quote,
// the backslash, and <, > and & for HTML).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
