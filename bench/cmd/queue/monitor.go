package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// monitor reads the server's MONITOR stream and attributes every command to
// what the clients sent: a script's inner commands (shown as from "lua"
// right after the script's EVALSHA) to the script's label. It is slow for
// the server, so only the profile phase uses it.
type monitor struct {
	conn net.Conn
	mu   sync.Mutex
	part string                      // current part (set by a sentinel ECHO)
	top  map[string]map[string]int64 // part -> label -> calls
	// part -> label -> inner command -> count
	inner map[string]map[string]map[string]int64
	seen  map[string]chan struct{} // sentinel -> closed when read
	done  chan error
}

func startMonitor(ctx context.Context, addr string) (*monitor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	conn.SetReadDeadline(time.Time{})
	m := &monitor{conn: conn, top: map[string]map[string]int64{}, inner: map[string]map[string]map[string]int64{},
		seen: map[string]chan struct{}{}, done: make(chan error, 1)}
	go func() { m.done <- m.read(r) }()
	return m, nil
}

// sentinel is an ECHO argument that switches the part being counted.
const sentinelPrefix = "sluice-bench-part:"

// expect returns a channel closed when the sentinel for part is read.
func (m *monitor) expect(part string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.seen[part]
	if !ok {
		ch = make(chan struct{})
		m.seen[part] = ch
	}
	return ch
}

func (m *monitor) read(r *bufio.Reader) error {
	cur := "" // label of the script whose inner commands follow
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if !strings.HasPrefix(line, "+") {
			continue
		}
		open := strings.IndexByte(line, '[')
		closing := strings.Index(line, "] ")
		if open < 0 || closing < open {
			continue
		}
		from := line[open+1 : closing]
		args := unquoteAll(line[closing+2:])
		if len(args) == 0 {
			continue
		}
		m.mu.Lock()
		if strings.HasSuffix(from, " lua") {
			if cur != "" {
				byLabel := m.inner[m.part]
				if byLabel == nil {
					byLabel = map[string]map[string]int64{}
					m.inner[m.part] = byLabel
				}
				if byLabel[cur] == nil {
					byLabel[cur] = map[string]int64{}
				}
				byLabel[cur][strings.ToUpper(args[0])]++
			}
			m.mu.Unlock()
			continue
		}
		name := strings.ToLower(args[0])
		if name == "echo" && len(args) > 1 && strings.HasPrefix(args[1], sentinelPrefix) {
			part := strings.TrimPrefix(args[1], sentinelPrefix)
			m.part = part
			ch, ok := m.seen[part]
			if !ok {
				ch = make(chan struct{})
				m.seen[part] = ch
			}
			close(ch)
			cur = ""
			m.mu.Unlock()
			continue
		}
		if name == "info" || name == "flushall" {
			cur = ""
			m.mu.Unlock()
			continue
		}
		label := commandLabel(args)
		cur = ""
		if strings.HasPrefix(name, "eval") {
			cur = label
		}
		if m.top[m.part] == nil {
			m.top[m.part] = map[string]int64{}
		}
		m.top[m.part][label]++
		m.mu.Unlock()
	}
}

// switchTo sends the sentinel for part through c and waits until the
// monitor has read it: every command sent before it is counted.
func (m *monitor) switchTo(ctx context.Context, echo func(context.Context, string) error, part string) error {
	ch := m.expect(part)
	if err := echo(ctx, sentinelPrefix+part); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("MONITOR did not show the sentinel within 30s")
	}
}

func (m *monitor) close() {
	m.conn.Close()
	<-m.done
}

// scriptRow is one label of one part of the profile.
type scriptRow struct {
	label    string
	calls    int64
	inner    map[string]int64
	innerSum int64
}

// rows returns part's labels, the most called first.
func (m *monitor) rows(part string) []scriptRow {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []scriptRow
	for l, n := range m.top[part] {
		r := scriptRow{label: l, calls: n, inner: m.inner[part][l]}
		for _, k := range r.inner {
			r.innerSum += k
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].calls+out[i].innerSum != out[j].calls+out[j].innerSum {
			return out[i].calls+out[i].innerSum > out[j].calls+out[j].innerSum
		}
		return out[i].label < out[j].label
	})
	return out
}

// describeInner lists a script's inner commands per call, e.g.
// "HGET×2 TIME LPUSH".
func describeInner(inner map[string]int64, calls int64) string {
	if len(inner) == 0 || calls == 0 {
		return ""
	}
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range inner {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool {
		if kvs[i].v != kvs[j].v {
			return kvs[i].v > kvs[j].v
		}
		return kvs[i].k < kvs[j].k
	})
	var parts []string
	for _, e := range kvs {
		per := float64(e.v) / float64(calls)
		switch {
		case per > 0.995 && per < 1.005:
			parts = append(parts, e.k)
		case per == float64(int64(per)):
			parts = append(parts, fmt.Sprintf("%s×%d", e.k, int64(per)))
		default:
			parts = append(parts, fmt.Sprintf("%s×%.2f", e.k, per))
		}
	}
	return strings.Join(parts, " ")
}

// unquoteAll splits MONITOR's quoted arguments: "a" "b\"c" "\x00".
func unquoteAll(s string) []string {
	var out []string
	i := 0
	for i < len(s) {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || s[i] != '"' {
			break
		}
		i++
		var b strings.Builder
		for i < len(s) && s[i] != '"' {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'a':
					b.WriteByte('\a')
				case 'b':
					b.WriteByte('\b')
				case 'x':
					if i+2 < len(s) {
						if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
							b.WriteByte(byte(v))
							i += 2
							break
						}
					}
					b.WriteByte('x')
				default:
					b.WriteByte(s[i])
				}
				i++
				continue
			}
			b.WriteByte(c)
			i++
		}
		i++ // closing quote
		out = append(out, b.String())
	}
	return out
}
