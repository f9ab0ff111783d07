package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCapCPUWritesV2 checks what capCPU writes on a cgroup v2 layout, in
// a directory made to look like one: the cpu controller turned on for
// the children, the quota over the period, and the process moved.
func TestCapCPUWritesV2(t *testing.T) {
	root := t.TempDir()
	for f, v := range map[string]string{"cgroup.controllers": "cpuset cpu io memory pids", "cgroup.subtree_control": "memory", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := capCPU(root, 4242, 0.35); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{
		"cgroup.subtree_control":         "+cpu",
		"sluice-scale-4242/cpu.max":      "35000 100000",
		"sluice-scale-4242/cgroup.procs": "4242",
	} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", f, b, err, want)
		}
	}
	if _, err := capCPU(root, 4243, 0); err == nil {
		t.Error("a cap of 0 CPUs was accepted")
	}
	if _, err := capCPU(t.TempDir(), 4244, 0.5); err == nil || !strings.Contains(err.Error(), "no cgroup cpu controller") {
		t.Errorf("a directory with no cgroup: %v; want an error that names the missing controller", err)
	}
}

// TestCapCPUOnThisMachine caps a real process in the machine's own cgroup
// tree, where the tree lets this user (root, as in CI) make groups: the
// process lands in its group with the quota asked, and undo takes it out
// and removes the group.
func TestCapCPUOnThisMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capping a process's CPU takes root")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	undo, err := capCPU(cgroupRoot, pid, 0.25)
	if err != nil {
		t.Skipf("this machine's cgroup tree takes no group of ours: %v", err)
	}
	name := "sluice-scale-" + strconv.Itoa(pid)
	in, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(in), "/"+name+"\n") {
		t.Errorf("process %d is in\n%s\nnot in %s", pid, in, name)
	}
	quota := ""
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, name, "cpu.max")); err == nil {
		quota, _, _ = strings.Cut(string(b), " ")
	} else if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cpu", name, "cpu.cfs_quota_us")); err == nil {
		quota = string(b)
	}
	if strings.TrimSpace(quota) != "25000" {
		t.Errorf("the group's quota is %q µs a period; want 25000", quota)
	}
	if err := undo(); err != nil {
		t.Fatalf("undo: %v", err)
	}
	if in, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); strings.Contains(string(in), name) {
		t.Errorf("after undo, process %d is still in %s:\n%s", pid, name, in)
	}
	for _, dir := range []string{filepath.Join(cgroupRoot, name), filepath.Join(cgroupRoot, "cpu", name)} {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s is still there after undo", dir)
		}
	}
}
