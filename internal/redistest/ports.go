package redistest

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// busOffset is the distance from a cluster node's port to its cluster bus
// port (redis-server's default, which works on every version).
const busOffset = 10000

// reserved holds the ports handed out to this process's live servers, and
// their bus ports, so that two servers started close together never pick
// the same one however the kernel recycles ephemeral ports.
var reserved struct {
	sync.Mutex
	ports map[int]bool
}

// pickPort returns a loopback port that was free a moment ago and is not
// used by another server of this process, and reserves it; for a cluster
// node, port+busOffset must be free too (and at most 65535). The ports are
// released with release. A process may still take them before
// redis-server binds them: launch then tries another.
func pickPort(cluster bool) (int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.ports == nil {
		reserved.ports = map[int]bool{}
	}
	var last error
	for range 100 {
		port, err := freePort(0)
		if err != nil {
			last = err
			continue
		}
		if reserved.ports[port] {
			continue
		}
		if cluster {
			bus := port + busOffset
			if bus > 65535 || reserved.ports[bus] {
				continue
			}
			if _, err := freePort(bus); err != nil {
				continue
			}
			reserved.ports[bus] = true
		}
		reserved.ports[port] = true
		return port, nil
	}
	if last == nil {
		last = errors.New("every candidate was in use")
	}
	return 0, fmt.Errorf("redistest: no free loopback port: %w", last)
}

// freePort listens on 127.0.0.1:port (0: any), closes, and returns the
// port that was bound.
func freePort(port int) (int, error) {
	l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return 0, err
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return p, nil
}

// release forgets a port reserved by pickPort.
func release(port int, cluster bool) {
	reserved.Lock()
	defer reserved.Unlock()
	delete(reserved.ports, port)
	if cluster {
		delete(reserved.ports, port+busOffset)
	}
}
