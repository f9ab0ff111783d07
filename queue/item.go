package queue

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// entryMarker begins every waiting-room entry: the header's grammar and
// its version (docs/queue.md, Entries; queue_handover.lua's read).
const entryMarker = "sluice/2"

// oldEntryMarker began the entries of sluice before v2, which held
// asynq's TaskMessage: this version refuses them (errOldEntry).
const oldEntryMarker = "sluice/1\t"

// errOldEntry is why an entry stored by an older sluice is not run.
var errOldEntry = errors.New("sluice: waiting-room entry of format sluice/1 (asynq's task inside), stored by an older sluice, which this one does not read: " +
	"drain the queue with the version that wrote it, or enqueue its jobs again")

// entry returns a waiting-room entry: a header line the scripts read by
// field name, then the job's envelope (JSON), which they copy without
// reading it:
//
//	sluice/2 TAB class=<class> TAB task=<task id> [TAB downstream=<name>] [TAB units=<n>] LF <envelope>
//
// No value holds a tab or a newline (docs/queue.md, Entries).
func entry(class, downstream, task string, units int64, env []byte) string {
	var b strings.Builder
	b.Grow(len(entryMarker) + len(class) + len(task) + len(downstream) + len(env) + 32)
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
	b.Write(env)
	return b.String()
}

// header is what an entry's header line says (see entry).
type header struct {
	class, downstream, task string
}

// readEntry splits an entry into its header, read by field name (in any
// order, the first of a name counting; others are skipped), and its
// envelope. ok is false for text that is no entry, as queue_handover.lua's
// read finds it.
func readEntry(it string) (h header, env []byte, ok bool) {
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

// item returns the job's entry in its tenant's list (see entry).
func (j *Job) item() (string, error) {
	class := j.Class()
	if strings.ContainsAny(class, "\t\n") {
		return "", errors.New("tenant class contains a tab or a newline")
	}
	env, err := j.encode()
	if err != nil {
		return "", err
	}
	return entry(class, j.Downstream, j.taskID(), j.units(), []byte(env)), nil
}

// decodeItem decodes the job of a tenant list's entry (see entry).
func decodeItem(it string) (*Job, error) {
	_, env, ok := readEntry(it)
	if !ok {
		if strings.HasPrefix(it, oldEntryMarker) {
			return nil, errOldEntry
		}
		return nil, errors.New("sluice: waiting-room text that is no entry")
	}
	return decodeJob(env)
}

// asynqTask returns the asynq task of a job for its hand-over to the
// shard's asynq queue, and the options asynq's Client enqueues it with:
// the one place that says what sluice writes into asynq. The task id is
// the entry's (Job.taskID), so that writing it again is refused
// (asynq.ErrTaskIDConflict). retention keeps it once done
// (ServerConfig.Retention).
func asynqTask(j *Job, env []byte, queue string, retention time.Duration) (*asynq.Task, []asynq.Option) {
	// One retry more than the job has left: asynq archives a task whose
	// retries are used up even after an error that is no failure (a
	// throttle Redis could not answer), and a worker that died; process
	// archives the job itself when its last allowed run fails.
	retry := max(j.maxRetry()-j.retried, 0) + 1
	opts := []asynq.Option{asynq.TaskID(j.taskID()), asynq.Queue(queue), asynq.MaxRetry(retry), asynq.Timeout(j.timeout())}
	if retention >= time.Second {
		opts = append(opts, asynq.Retention(retention))
	}
	return asynq.NewTask(j.Type, env), opts
}
