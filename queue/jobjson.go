package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
)

// ParseJob reads one job written as JSON, the shape of EnqueueRequest, as
// POST /enqueue and `enqueue -f` take it. So that one text has one meaning
// whatever reads it (a proxy that checks the tenant, say), it refuses a
// key given twice (also with escapes, "\u0074enant"), a key in another
// case than its field's ("TENANT"), an unknown key and anything after the
// object, which encoding/json alone would let pass. The error wraps
// ErrInvalidJob.
func ParseJob(data []byte) (Job, error) {
	if err := checkKeys(data); err != nil {
		return Job{}, invalid("%v", err)
	}
	var req EnqueueRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return Job{}, invalid("%v", err)
	}
	job := Job{ID: req.ID, Tenant: req.Tenant, Type: req.Type, Payload: []byte(req.Payload), Downstream: req.Downstream, Cost: req.Cost, Units: req.Units, MaxRetry: req.MaxRetry}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil {
			return Job{}, invalid("timeout: %v", err)
		}
		job.Timeout = d
	}
	switch {
	case req.RunAt != "" && req.RunIn != "":
		return Job{}, invalid("give run_at or run_in, not both")
	case req.RunAt != "":
		t, err := time.Parse(time.RFC3339Nano, req.RunAt)
		if err != nil {
			return Job{}, invalid("run_at: want RFC 3339, such as 2026-11-27T09:00:00Z: %v", err)
		}
		job.RunAt = t
	case req.RunIn != "":
		d, err := time.ParseDuration(req.RunIn)
		if err != nil {
			return Job{}, invalid("run_in: %v", err)
		}
		if d < 0 {
			return Job{}, invalid("run_in must not be negative, got %v", d)
		}
		job.RunAt = time.Now().Add(d)
	}
	return job, nil
}

// jobKeys are EnqueueRequest's JSON keys.
var jobKeys = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeOf(EnqueueRequest{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}()

// checkKeys refuses a text that is not exactly one JSON object whose keys
// are EnqueueRequest's, each once, in their own case.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return errors.New("empty")
	}
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("a JSON object expected")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("key %.40q given twice", key)
		case !jobKeys[key]:
			return fmt.Errorf("unknown key %.40q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("one JSON object expected")
	}
	return nil
}
