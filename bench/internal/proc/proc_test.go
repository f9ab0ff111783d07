package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLineWatch(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := &lineWatch{w: f}
	l.Write([]byte("first line\nhttp://127.0.0.1:5/\npart"))
	select {
	case got := <-l.watch("http://"):
		if got != "http://127.0.0.1:5/" {
			t.Errorf("earlier line: %q", got)
		}
	default:
		t.Error("a line written before watch was not found")
	}
	ch := l.watch("started")
	l.Write([]byte("ial; worker star"))
	select {
	case got := <-ch:
		t.Errorf("a partial line matched: %q", got)
	default:
	}
	l.Write([]byte("ted ok\n"))
	select {
	case got := <-ch:
		if got != "partial; worker started ok" {
			t.Errorf("later line: %q", got)
		}
	default:
		t.Error("a line written after watch was not found")
	}
	if !strings.HasSuffix(l.tail(), "started ok\n") {
		t.Errorf("tail %q", l.tail())
	}
}
