package queue

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"time"
)

// itemMark starts every entry in a tenant's list.
const itemMark = "sluice2\t"

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
// A header comes first, which names the class:
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
		timeout = uint64(j.Timeout / time.Second)
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
	b.Write(h)
	b.WriteString(class)
	b.WriteByte('\t')
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

// itemEnvelope returns the envelope of a tenant list's entry: the part
// of its message that its header points to.
func itemEnvelope(it string) ([]byte, error) {
	rest, ok := strings.CutPrefix(it, itemMark)
	if !ok {
		return nil, errors.New("sluice: waiting-room entry without a header")
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
// waiting room (the key sluice:q:t:{Q}:<tenant>, docs/queue.md, Keys): for
// tools that look at what waits.
func DecodeEntry(entry string) (*Job, error) { return decodeItem(entry) }

// decodeItem decodes the job of a tenant list's entry (see item).
func decodeItem(it string) (*Job, error) {
	env, err := itemEnvelope(it)
	if err != nil {
		return nil, err
	}
	return decodeJob(env)
}
