package queue

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// asynqVersion is the asynq release whose storage format the hand-over
// was checked against: the TaskMessage that taskMessage writes, and the
// task hash and pending list that queue_handover.lua writes. go.mod must
// require this version (TestAsynqVersion); TestAsynqReadsHandedOverTasks
// and TestHandOverWritesWhatAsynqWrites check the format against it. On
// an asynq upgrade, run them, then change this constant.
const asynqVersion = "v0.26.0"

// The numbers of the fields of asynq's TaskMessage that the hand-over
// writes (asynq's internal/proto/asynq.proto).
const (
	fieldType      = 1 // string
	fieldPayload   = 2 // bytes: the job's envelope
	fieldID        = 3 // string: the task id
	fieldQueue     = 4 // string
	fieldRetry     = 5 // int32: the retries left
	fieldTimeout   = 8 // int64: seconds
	fieldRetention = 12
)

// taskMessage returns asynq's TaskMessage of a task, byte for byte as
// asynq's Client writes it (Go's protobuf: fields in number order, proto3
// leaving out empty strings and zeros), without Retention, the workers'
// setting, which the hand-over appends (retentionField). It also returns
// where in the message the task id starts.
func taskMessage(typ string, payload []byte, id, queue string, retry, timeout int64) (msg []byte, idAt int) {
	b := make([]byte, 0, len(typ)+len(payload)+len(id)+len(queue)+32)
	str := func(b []byte, num protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	b = str(b, fieldType, typ)
	if len(payload) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, fieldPayload, protowire.BytesType), payload)
	}
	idAt = len(b) + protowire.SizeTag(fieldID) + protowire.SizeVarint(uint64(len(id)))
	b = str(b, fieldID, id)
	b = str(b, fieldQueue, queue)
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{fieldRetry, retry}, {fieldTimeout, timeout}} {
		if f.v != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, f.num, protowire.VarintType), uint64(f.v))
		}
	}
	return b, idAt
}

// retentionField returns the Retention field of asynq's TaskMessage for
// d, in whole seconds as asynq counts it ("" for none): the hand-over
// appends it to each message, after the fields taskMessage writes.
func retentionField(d time.Duration) string {
	s := int64(d / time.Second)
	if s <= 0 {
		return ""
	}
	return string(protowire.AppendVarint(protowire.AppendTag(nil, fieldRetention, protowire.VarintType), uint64(s)))
}

// entry returns a waiting-room entry: a header and the task message,
//
//	class TAB task-id-offset:task-id-length TAB message
//
// The hand-over (queue_handover.lua) reads the class and the task id
// from it with one Lua pattern and copies the message into asynq's task
// hash as it is.
func entry(class, typ string, payload []byte, id, queue string, retry, timeout int64) string {
	msg, at := taskMessage(typ, payload, id, queue, retry, timeout)
	return class + "\t" + strconv.Itoa(at) + ":" + strconv.Itoa(len(id)) + "\t" + string(msg)
}

// item returns the job's entry in its tenant's list (see entry): the
// asynq task message with the envelope as payload, built here rather
// than in the claim, which takes about 3 µs of redis-server's time off
// each job handed over (BenchmarkClaimScript), for about 70 bytes more
// per waiting job than the bare envelope, most of them the task id,
// which asynq's message must hold.
func (j *Job) item(queue string) (string, error) {
	class := j.Class()
	if strings.ContainsAny(class, "\t\n") {
		return "", errors.New("tenant class contains a tab or a newline")
	}
	env, err := j.envelope()
	if err != nil {
		return "", err
	}
	retry := max(j.maxRetry()-j.retried, 0)
	return entry(class, j.Type, env, j.taskID(), queue, int64(retry), int64(j.timeout()/time.Second)), nil
}

// errNoEntry is decodeItem's answer for text that is no entry.
var errNoEntry = errors.New("sluice: waiting-room entry that is no task message")

// DecodeEntry decodes the job of one entry of a tenant's list in the
// waiting room (the key sluice:q:t:{Q}:<tenant>, docs/queue.md, Keys): for
// tools that look at what waits.
func DecodeEntry(entry string) (*Job, error) { return decodeItem(entry) }

// decodeItem decodes the job of a tenant list's entry (see entry): the
// envelope in its message's payload.
func decodeItem(it string) (*Job, error) {
	_, rest, ok1 := strings.Cut(it, "\t")
	_, msg, ok2 := strings.Cut(rest, "\t")
	if !ok1 || !ok2 {
		return nil, errNoEntry
	}
	b := []byte(msg)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errNoEntry
		}
		b = b[n:]
		if num == fieldPayload && typ == protowire.BytesType {
			env, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, errNoEntry
			}
			return decodeJob(env)
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, errNoEntry
		}
		b = b[n:]
	}
	return nil, errNoEntry
}
