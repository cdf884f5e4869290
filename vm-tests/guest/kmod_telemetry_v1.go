package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioV1ID moves the cpu controller to a cgroup v1 hierarchy (ids
// there come from another id space and can equal v2 ids) and runs a
// throttled group in it, with a watched v2 cgroup whose id equals the v1
// group's when the id spaces allow it: the CFS hook must not be called
// for v1 groups at all (hook_calls unchanged) and no record may carry the
// watched id.
func scenarioV1ID(*harness.Env) error {
	return withCPUOnV1(v1IDCheck)
}

// withCPUOnV1 moves the cpu controller from cgroup v2 to a v1 hierarchy
// mounted at a temporary root, runs fn with that root, and moves cpu back
// for the scenarios after it.
func withCPUOnV1(fn func(v1root string) error) (err error) {
	const v1root = "/tmp/v1cpu"
	rootCtl := filepath.Join(harness.CgroupRoot, "cgroup.subtree_control")
	if err := retry(10*time.Second, func() error { return os.WriteFile(rootCtl, []byte("-cpu"), 0o644) }); err != nil {
		return fmt.Errorf("cpu off cgroup v2: %w", err)
	}
	if err := os.MkdirAll(v1root, 0o755); err != nil {
		return err
	}
	if err := retry(10*time.Second, func() error { return unix.Mount("none", v1root, "cgroup", 0, "cpu") }); err != nil {
		return fmt.Errorf("mount cgroup v1 cpu: %w", err)
	}
	// The v1 root goes away (and releases cpu) only when unmounted with
	// no child left, and a removed child lingers until its last reference
	// drops: remount and unmount until cpu can be enabled on v2 again.
	defer func() {
		_ = unix.Unmount(v1root, 0)
		rerr := retry(20*time.Second, func() error {
			err := os.WriteFile(rootCtl, []byte("+cpu"), 0o644)
			if err != nil {
				_ = unix.Mount("none", v1root, "cgroup", 0, "cpu")
				time.Sleep(200 * time.Millisecond)
				_ = unix.Unmount(v1root, 0)
			}
			return err
		})
		if rerr != nil && err == nil {
			err = fmt.Errorf("cpu back to cgroup v2: %w", rerr)
		}
	}()
	return fn(v1root)
}

func v1IDCheck(v1root string) error {
	// A v2 cgroup and a v1 group with the same id. Every kernfs node takes
	// an id (files too), so a new cgroup advances its hierarchy's ids by
	// one plus its files; recreate whichever is behind. v2 cgroups
	// alternate between the root (memory files) and a parent with no
	// controllers (none), two step sizes, so the two sequences meet.
	p, err := harness.NewCgroup("v1-id-p")
	if err != nil {
		return err
	}
	defer p.Remove()
	g := filepath.Join(v1root, "g")
	ino := func(path string) (uint64, error) {
		var st unix.Stat_t
		err := unix.Stat(path, &st)
		return st.Ino, err
	}
	if err := os.Mkdir(g, 0o755); err != nil {
		return err
	}
	defer func() { _ = os.Remove(g) }()
	v1id, err := ino(g)
	if err != nil {
		return err
	}
	w := filepath.Join(harness.CgroupRoot, "v1-id")
	if err := os.Mkdir(w, 0o755); err != nil {
		return err
	}
	defer func() { _ = os.Remove(w) }()
	v2id, err := ino(w)
	if err != nil {
		return err
	}
	for i := 0; i < 20000 && v1id != v2id; i++ {
		if v1id < v2id {
			if err := os.Remove(g); err != nil {
				return err
			}
			if err := os.Mkdir(g, 0o755); err != nil {
				return err
			}
			if v1id, err = ino(g); err != nil {
				return err
			}
			continue
		}
		if err := os.Remove(w); err != nil {
			return err
		}
		w = filepath.Join(harness.CgroupRoot, "v1-id")
		if i%2 == 1 {
			w = filepath.Join(p.Path, "w")
		}
		if err := os.Mkdir(w, 0o755); err != nil {
			return err
		}
		if v2id, err = ino(w); err != nil {
			return err
		}
	}
	same := v1id == v2id
	fmt.Printf("    v2 cgroup %s id %d, v1 cpu group id %d (equal: %v)\n", w, v2id, v1id, same)
	// Should the sequences not meet, the hook_calls check below still
	// shows no v1 group reaches the hook.
	watchID := v2id

	l, err := listen(kmod.GroupTelemetry)
	if err != nil {
		return err
	}
	defer l.close()
	ctl, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.Watch(watchID); err != nil {
		return err
	}
	defer func() { _ = ctl.Unwatch(watchID) }()
	for f, v := range map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "20000"} {
		if err := os.WriteFile(filepath.Join(g, f), []byte(v), 0o644); err != nil {
			return err
		}
	}
	st0, err := ctl.Stats()
	if err != nil {
		return err
	}
	hog := exec.Command("/proc/self/exe", "hog-cpu")
	if err := hog.Start(); err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	if err := os.WriteFile(filepath.Join(g, "cgroup.procs"), []byte(strconv.Itoa(hog.Process.Pid)), 0o644); err != nil {
		return err
	}
	l.drainRecords()
	bad := 0
	deadline := time.After(2 * time.Second)
collect:
	for {
		select {
		case r := <-l.recs:
			if r.CgroupID == watchID {
				bad++
			}
		case <-deadline:
			break collect
		}
	}
	st1, err := ctl.Stats()
	if err != nil {
		return err
	}
	stat, _ := os.ReadFile(filepath.Join(g, "cpu.stat"))
	fmt.Printf("    v1 group over 2 s: %s; hook calls %d -> %d; records with id %d: %d\n",
		strings.Join(strings.Fields(string(stat)), " "), st0.HookCalls, st1.HookCalls, watchID, bad)
	_ = hog.Process.Kill()
	_, _ = hog.Process.Wait()
	if !strings.Contains(string(stat), "nr_throttled") || strings.Contains(string(stat), "nr_throttled 0") {
		return errors.New("the v1 group was not throttled: its period timer did not run, nothing proven")
	}
	if st1.HookCalls != st0.HookCalls {
		return fmt.Errorf("the CFS hook ran %d times for a cgroup v1 group", st1.HookCalls-st0.HookCalls)
	}
	if bad > 0 {
		return fmt.Errorf("%d records reported for the watched v2 id from a v1 group", bad)
	}
	return nil
}

// retry runs fn until it succeeds or d passes (controllers move between
// hierarchies only once dying cgroups are gone: EBUSY for a while).
func retry(d time.Duration, fn func() error) error {
	end := time.Now().Add(d)
	for {
		err := fn()
		if err == nil || time.Now().After(end) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
