package queue

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// asynqVersion is the asynq release whose storage format the hand-over
// was checked against (TestAsynqReadsHandedOverTasks,
// TestHandOverWritesWhatAsynqWrites); go.mod must require it
// (TestAsynqVersion). On an asynq upgrade, run them, then change it.
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

// retentionField returns the Retention field of asynq's TaskMessage for
// d, in whole seconds ("" for none).
func retentionField(d time.Duration) string {
	s := int64(d / time.Second)
	if s <= 0 {
		return ""
	}
	return string(protowire.AppendVarint(protowire.AppendTag(nil, fieldRetention, protowire.VarintType), uint64(s)))
}

// entry returns a waiting-room entry, "class TAB task-id-offset:length TAB
// message", the message byte for byte asynq's Client's TaskMessage of the
// job's task but for Retention, which the hand-over appends (docs/queue.md,
// Entries).
func entry(class, typ string, payload []byte, id, queue string, retry, timeout int64) string {
	var b []byte
	str := func(num protowire.Number, s string) {
		if s != "" {
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
		}
	}
	num := func(num protowire.Number, v int64) {
		if v != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(v))
		}
	}
	str(fieldType, typ)
	str(fieldPayload, string(payload))
	idAt := len(b) + protowire.SizeTag(fieldID) + protowire.SizeVarint(uint64(len(id)))
	str(fieldID, id)
	str(fieldQueue, queue)
	num(fieldRetry, retry)
	num(fieldTimeout, timeout)
	return class + "\t" + strconv.Itoa(idAt) + ":" + strconv.Itoa(len(id)) + "\t" + string(b)
}

// item returns the job's entry in its tenant's list (see entry), its
// envelope as the task's payload.
func (j *Job) item(queue string) (string, error) {
	class := j.Class()
	if strings.ContainsAny(class, "\t\n") {
		return "", errors.New("tenant class contains a tab or a newline")
	}
	env, err := j.encode()
	if err != nil {
		return "", err
	}
	// One retry more than the job has left: asynq archives a task whose
	// retries are used up even after an error that is no failure (a
	// throttle Redis could not answer), and a worker that died; process
	// archives the job itself when its last allowed run fails.
	retry := max(j.maxRetry()-j.retried, 0) + 1
	return entry(class, j.Type, []byte(env), j.taskID(), queue, int64(retry), int64(j.timeout()/time.Second)), nil
}

// decodeItem decodes the job of a tenant list's entry (see entry): the
// envelope in its message's payload, which follows the type.
func decodeItem(it string) (*Job, error) {
	_, rest, _ := strings.Cut(it, "\t")
	_, msg, ok := strings.Cut(rest, "\t")
	b := []byte(msg)
	for _, field := range []protowire.Number{fieldType, fieldPayload} {
		num, typ, n := protowire.ConsumeTag(b)
		if !ok || n < 0 || num != field || typ != protowire.BytesType {
			break
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			break
		}
		if field == fieldPayload {
			return decodeJob(v)
		}
		b = b[n+m:]
	}
	return nil, errors.New("sluice: waiting-room entry that is no task message")
}
