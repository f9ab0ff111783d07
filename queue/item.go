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

// entryMarker begins every waiting-room entry: the header's grammar and
// its version (docs/queue.md, Entries; queue_handover.lua's read).
const entryMarker = "sluice/1"

// taskMessage returns asynq's TaskMessage of a task, byte for byte what
// asynq's Client writes but for Retention, which the hand-over appends.
// It is the only place that encodes one.
func taskMessage(typ string, payload []byte, id, queue string, retry, timeout int64) []byte {
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
	str(fieldID, id)
	str(fieldQueue, queue)
	num(fieldRetry, retry)
	num(fieldTimeout, timeout)
	return b
}

// entry returns a waiting-room entry: a header line the scripts read by
// field name, then the task's message (taskMessage), which they copy
// without reading it:
//
//	sluice/1 TAB class=<class> TAB task=<task id> [TAB downstream=<name>] [TAB units=<n>] LF <message>
//
// No value holds a tab or a newline (docs/queue.md, Entries).
func entry(class, downstream, task string, units int64, msg []byte) string {
	n := len(entryMarker) + len(class) + len(task) + len(downstream) + len(msg) + 32
	var b strings.Builder
	b.Grow(n)
	b.WriteString(entryMarker)
	b.WriteString("\tclass=")
	b.WriteString(class)
	b.WriteString("\ttask=")
	b.WriteString(task)
	if downstream != "" {
		b.WriteString("\tdownstream=")
		b.WriteString(downstream)
	}
	if units > 1 {
		b.WriteString("\tunits=")
		b.WriteString(strconv.FormatInt(units, 10))
	}
	b.WriteByte('\n')
	b.Write(msg)
	return b.String()
}

// header is what an entry's header line says (see entry).
type header struct {
	class, downstream, task string
}

// readEntry splits an entry into its header, read by field name (in any
// order, the first of a name counting; others are skipped), and its
// message. ok is false for text that is no entry, as queue_handover.lua's
// read finds it.
func readEntry(it string) (h header, msg []byte, ok bool) {
	line, rest, found := strings.Cut(it, "\n")
	fields, marked := strings.CutPrefix(line, entryMarker)
	if !found || !marked || !strings.HasPrefix(fields, "\t") {
		return h, nil, false
	}
	h = header{class: field(fields, "class"), downstream: field(fields, "downstream"), task: field(fields, "task")}
	// A task id is sluice:<scoped id>@<nonce>:<moves> (Job.taskID).
	id, isOurs := strings.CutPrefix(h.task, "sluice:")
	if h.class == "" || !isOurs || strings.Index(id, "@") < 1 {
		return h, nil, false
	}
	return h, []byte(rest), true
}

// field returns the value of the first field called name in a header's
// fields, each TAB name=value ("" if there is none).
func field(fields, name string) string {
	_, v, _ := strings.Cut(fields, "\t"+name+"=")
	v, _, _ = strings.Cut(v, "\t")
	return v
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
	task := j.taskID()
	return entry(class, j.Downstream, task, j.units(), taskMessage(j.Type, []byte(env), task, queue, int64(retry), int64(j.timeout()/time.Second))), nil
}

// decodeItem decodes the job of a tenant list's entry (see entry): the
// envelope is its message's payload.
func decodeItem(it string) (*Job, error) {
	_, b, ok := readEntry(it)
	for ok && len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		if num == fieldPayload && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				break
			}
			return decodeJob(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			break
		}
		b = b[n+m:]
	}
	return nil, errors.New("sluice: waiting-room entry that is no task message")
}
