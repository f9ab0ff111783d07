package queue

import (
	"encoding/base64"
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
