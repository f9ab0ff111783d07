package queue

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// itemMark starts every entry that this version writes into a tenant's
// list; an entry without it is an envelope of an earlier version (JSON,
// starting with '{'), which the claim still hands over.
const itemMark = "sluice2\t"

// entriesField and entriesVersion mark, in the queue's meta hash, a queue
// that a worker reading this version's entries has started on
// (Server.Start); until then the enqueue script queues bare envelopes
// (queue_enqueue.lua compares with the same literal). Version 2 entries
// all had a header; version 3 leaves it out for the default class.
const entriesField, entriesVersion = "entries", "3"

// item returns the job's entry in its tenant's list: the asynq task
// message with the envelope as payload, written here as asynq's Client
// writes it (queue_handover.lua says which fields) less the Retention
// field, which is the workers' setting and which the claim appends.
// Building the message here rather than in Lua takes about 3 µs of
// redis-server's time off each job that a claim hands over
// (BenchmarkClaimScript), for about 70 bytes more per waiting job than
// the bare envelope, most of them the task id, which asynq's message must
// hold.
//
// A job of the default metrics class is the message alone: it starts
// with the tag of field 1 (0x0A), and the claim reads the task id (field
// 3) from it and copies the rest as it is, about 1 µs less per job than
// the header's pattern and copy. A job of another class carries a
// header first, which names the class:
//
//	sluice2 TAB envelope-offset:length:task-id-offset:length TAB class TAB
//
// with offsets into the message, so that the claim finds the task id (and
// in it the job's id, the part before '@') with one pattern.
func (j *Job) item(queue string) (string, error) {
	class := j.class()
	if strings.ContainsAny(class, "\t\n") {
		return "", errors.New("tenant class contains a tab or a newline")
	}
	env, err := j.envelope()
	if err != nil {
		return "", err
	}
	task := j.taskID()
	retry := uint64(max(j.maxRetry()-j.Retried, 0))
	timeout := uint64(1800)
	if j.Timeout > 0 {
		timeout = uint64(j.timeoutSeconds())
	}
	// Protocol buffers: fields in number order, proto3 leaving out empty
	// strings and zeros; a tag is the field number << 3 | the wire type
	// (0 varint, 2 length-delimited), as a varint, which is Go's uvarint.
	// Type (1) and the envelope (2) come first, then the task id (3).
	envAt := bytesFieldLen(j.Type) + 1 + uvarintLen(uint64(len(env)))
	taskAt := envAt + len(env) + 1 + uvarintLen(uint64(len(task)))
	var hdr [64]byte
	h := append(hdr[:0], itemMark...)
	h = strconv.AppendInt(h, int64(envAt), 10)
	h = append(h, ':')
	h = strconv.AppendInt(h, int64(len(env)), 10)
	h = append(h, ':')
	h = strconv.AppendInt(h, int64(taskAt), 10)
	h = append(h, ':')
	h = strconv.AppendInt(h, int64(len(task)), 10)
	h = append(h, '\t')

	var b strings.Builder
	b.Grow(len(h) + len(class) + 1 + taskAt + len(task) + bytesFieldLen(queue) + 2*binary.MaxVarintLen64)
	// A message without a type (field 1) would not start with its tag;
	// Enqueue refuses such jobs, but the header keeps any job readable.
	if class != defaultClass || j.Type == "" {
		b.Write(h)
		b.WriteString(class)
		b.WriteByte('\t')
	}
	writeBytesField(&b, 1, j.Type)
	writeUvarint(&b, 2<<3|2)
	writeUvarint(&b, uint64(len(env)))
	b.Write(env)
	writeBytesField(&b, 3, task)
	writeBytesField(&b, 4, queue)
	writeUintField(&b, 5, retry)
	writeUintField(&b, 8, timeout)
	return b.String(), nil
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// bytesFieldLen is the length of s as a length-delimited field of a
// number below 16 (a one-byte tag).
func bytesFieldLen(s string) int {
	if s == "" {
		return 0
	}
	return 1 + uvarintLen(uint64(len(s))) + len(s)
}

func writeUvarint(b *strings.Builder, v uint64) {
	var buf [binary.MaxVarintLen64]byte
	b.Write(binary.AppendUvarint(buf[:0], v))
}

func writeBytesField(b *strings.Builder, field uint64, s string) {
	if s == "" {
		return
	}
	writeUvarint(b, field<<3|2)
	writeUvarint(b, uint64(len(s)))
	b.WriteString(s)
}

func writeUintField(b *strings.Builder, field, v uint64) {
	if v == 0 {
		return
	}
	writeUvarint(b, field<<3)
	writeUvarint(b, v)
}

// itemEnvelope returns the envelope of a tenant list's entry: field 2 of
// a bare message, the part of a headed item's message that its header
// points to, or the entry itself when it is an envelope of an earlier
// version.
func itemEnvelope(it string) ([]byte, error) {
	if strings.HasPrefix(it, "\x0a") {
		return messageEnvelope(it)
	}
	rest, ok := strings.CutPrefix(it, itemMark)
	if !ok {
		return []byte(it), nil
	}
	offsets, rest, ok1 := strings.Cut(rest, "\t")
	_, msg, ok2 := strings.Cut(rest, "\t")
	at, n, ok3 := strings.Cut(offsets, ":")
	n, _, ok4 := strings.Cut(n, ":")
	off, err1 := strconv.Atoi(at)
	size, err2 := strconv.Atoi(n)
	if !ok1 || !ok2 || !ok3 || !ok4 || err1 != nil || err2 != nil || off < 0 || size < 0 || off+size > len(msg) {
		return nil, errors.New("sluice: waiting-room entry with a bad header")
	}
	return []byte(msg[off : off+size]), nil
}

// DecodeEntry decodes the job of one entry of a tenant's list in the
// waiting room (the key sluice:q:t:{Q}:<tenant>, docs/queue.md, Keys), of
// this version or of an earlier one: for tools that look at what waits.
func DecodeEntry(entry string) (*Job, error) { return decodeItem(entry) }

// decodeItem decodes the job of a tenant list's entry (see item).
func decodeItem(it string) (*Job, error) {
	env, err := itemEnvelope(it)
	if err != nil {
		return nil, err
	}
	return decodeJob(env)
}

// errNoMessage is messageEnvelope's answer for text that is no message.
var errNoMessage = errors.New("sluice: waiting-room entry that is no task message")

// messageEnvelope returns field 2 of msg, a message item wrote (field 1,
// the type, first; then field 2, the envelope).
func messageEnvelope(msg string) ([]byte, error) {
	at := 0
	for _, tag := range []byte{1<<3 | 2, 2<<3 | 2} {
		if at >= len(msg) || msg[at] != tag {
			return nil, errNoMessage
		}
		n, w := binary.Uvarint([]byte(msg[at+1 : min(len(msg), at+1+binary.MaxVarintLen64)]))
		if w <= 0 || n > uint64(len(msg)-at-1-w) {
			return nil, errNoMessage
		}
		if tag == 2<<3|2 {
			return []byte(msg[at+1+w : at+1+w+int(n)]), nil
		}
		at += 1 + w + int(n)
	}
	return nil, errNoMessage
}
