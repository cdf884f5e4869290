package harness

import (
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/escra-dev/escra/daemon/source/kmod"
)

// OOMCgroup is a cgroup under a memory.max whose OOM requests come to
// Owner, escrad's socket in the scenarios: escra.ko asks it when a charge
// fails at the limit and waits for its verdict.
type OOMCgroup struct {
	*Cgroup
	Owner   *kmod.Owner
	restore func()
	closed  bool
}

// NewOOMCgroup creates cgroup name with memory.max maxBytes, watched by a
// new owner socket. timeoutMs > 0 sets escra.ko's oom_timeout_ms until
// Close; 0 leaves it as it is.
func NewOOMCgroup(name string, maxBytes int64, timeoutMs int) (_ *OOMCgroup, err error) {
	f := &OOMCgroup{restore: func() {}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if timeoutMs > 0 {
		if f.restore, err = SetOOMTimeout(timeoutMs); err != nil {
			f.restore = func() {}
			return nil, err
		}
	}
	if f.Cgroup, err = NewCgroup(name); err != nil {
		return nil, err
	}
	if err = f.Set("memory.max", strconv.FormatInt(maxBytes, 10)); err != nil {
		return nil, err
	}
	if f.Owner, err = kmod.DialOwner(); err != nil {
		return nil, err
	}
	if err = f.Owner.Watch(f.ID); err != nil {
		return nil, err
	}
	return f, nil
}

// Close unwatches, closes the owner, removes the cgroup and restores
// oom_timeout_ms, in that order; a second call does nothing.
func (f *OOMCgroup) Close() {
	if f.closed {
		return
	}
	f.closed = true
	if f.Owner != nil {
		if f.Cgroup != nil {
			_ = f.Owner.Unwatch(f.ID)
		}
		f.Owner.Close()
	}
	if f.Cgroup != nil {
		f.Remove()
	}
	f.restore()
}

// DenyPending answers "not granted" to the requests already queued on the
// owner socket and returns how many there were.
func DenyPending(own *kmod.Owner) int {
	n := 0
	for {
		select {
		case req := <-own.Requests():
			n++
			_ = own.ReplyOOM(req.ID, false)
		default:
			return n
		}
	}
}

// GrantUntilExit answers every OOM request of the owner by raising cg's
// memory.max 16 MiB above the limit the request saw, then granting, until
// cmd exits (or is killed after d). It returns cmd's state and the grants.
func GrantUntilExit(own *kmod.Owner, cg *Cgroup, cmd *exec.Cmd, d time.Duration) (*os.ProcessState, int, error) {
	var ps *os.ProcessState
	var err error
	exited := make(chan struct{})
	go func() { ps, err = WaitTimeout(cmd, d); close(exited) }()
	grants := 0
	for {
		select {
		case req := <-own.Requests():
			if serr := cg.Set("memory.max", strconv.FormatUint(req.MaxBytes+16<<20, 10)); serr != nil {
				_ = own.ReplyOOM(req.ID, false)
				_ = cmd.Process.Kill()
				<-exited
				return ps, grants, serr
			}
			if own.ReplyOOM(req.ID, true) == nil {
				grants++
			}
		case <-exited:
			return ps, grants, err
		}
	}
}
