package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupRoot is where the guest's cgroup v2 hierarchy is mounted.
const CgroupRoot = "/sys/fs/cgroup"

// SetupCgroups mounts cgroup2 (if /init did not) and enables cpu+memory
// for children of the root.
func SetupCgroups() error {
	if _, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers")); err != nil {
		if err := os.MkdirAll(CgroupRoot, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("none", CgroupRoot, "cgroup2", 0, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(CgroupRoot, "cgroup.subtree_control"), []byte("+cpu +memory"), 0o644)
}

// Cgroup is a cgroup v2 directory; ID is the directory's inode, the id
// escra.ko's watches and records use.
type Cgroup struct {
	Path string
	ID   uint64
}

// NewCgroup creates the cgroup v2 directory name under the root.
func NewCgroup(name string) (*Cgroup, error) {
	p := filepath.Join(CgroupRoot, name)
	_ = os.Remove(p)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return nil, err
	}
	return &Cgroup{Path: p, ID: st.Ino}, nil
}

// Set writes val to the cgroup's file.
func (c *Cgroup) Set(file, val string) error {
	if err := os.WriteFile(filepath.Join(c.Path, file), []byte(val), 0o644); err != nil {
		return fmt.Errorf("%s/%s <- %q: %w", filepath.Base(c.Path), file, val, err)
	}
	return nil
}

// Get reads the cgroup's file, trimmed.
func (c *Cgroup) Get(file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.Path, file))
	return strings.TrimSpace(string(b)), err
}

// Keyed reads one "key value" line of a flat-keyed file (cpu.stat, memory.events).
func (c *Cgroup) Keyed(file, key string) (uint64, error) {
	s, err := c.Get(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no key %q", file, key)
}

// Remove kills what is left in the cgroup and removes it.
func (c *Cgroup) Remove() {
	_ = os.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1"), 0o644)
	for i := 0; i < 100; i++ {
		if err := os.Remove(c.Path); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Start runs this binary's workload subcommand inside the cgroup from its
// first instruction (clone3 CLONE_INTO_CGROUP).
func (c *Cgroup) Start(args ...string) (*exec.Cmd, error) {
	dir, err := os.Open(c.Path)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off")
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}
