package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cgroupRoot is where Linux mounts its control groups.
const cgroupRoot = "/sys/fs/cgroup"

// cfsPeriod is the period, in µs, over which a capped process's quota of
// CPU time is counted: the kernel's default.
const cfsPeriod = 100_000

// capCPU moves process pid into a control group of its own under root
// that lets it run at most cores CPUs' worth of time, as a server on a
// host or a container of that size would: -redis-cpu. It takes cgroup v2
// (root holds cgroup.controllers) or v1's cpu controller (root/cpu), and
// needs root. undo moves pid back to the top group and removes the one it
// made.
func capCPU(root string, pid int, cores float64) (undo func() error, err error) {
	if cores <= 0 {
		return nil, fmt.Errorf("a CPU cap must be above 0, not %v", cores)
	}
	quota := strconv.Itoa(int(cores * cfsPeriod))
	name := "sluice-scale-" + strconv.Itoa(pid)
	var top, dir string
	var limits [][2]string // file, value
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		top, dir = root, filepath.Join(root, name)
		ctl, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if err != nil {
			return nil, err
		}
		if !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " cpu ") {
			if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
				return nil, fmt.Errorf("turning on cgroup v2's cpu controller: %w", err)
			}
		}
		limits = [][2]string{{"cpu.max", quota + " " + strconv.Itoa(cfsPeriod)}}
	} else {
		top = filepath.Join(root, "cpu")
		if _, err := os.Stat(filepath.Join(top, "cpu.cfs_quota_us")); err != nil {
			return nil, fmt.Errorf("no cgroup cpu controller under %s (v2's cgroup.controllers, or v1's cpu/cpu.cfs_quota_us)", root)
		}
		dir = filepath.Join(top, name)
		limits = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cfsPeriod)}, {"cpu.cfs_quota_us", quota}}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	undo = func() error {
		// The server may have exited already: its group is then empty.
		if err := os.WriteFile(filepath.Join(top, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return syscall.Rmdir(dir)
	}
	for _, l := range limits {
		if err := os.WriteFile(filepath.Join(dir, l[0]), []byte(l[1]), 0o644); err != nil {
			_ = syscall.Rmdir(dir)
			return nil, fmt.Errorf("setting %s: %w", l[0], err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		_ = syscall.Rmdir(dir)
		return nil, fmt.Errorf("moving process %d into %s: %w", pid, dir, err)
	}
	return undo, nil
}
