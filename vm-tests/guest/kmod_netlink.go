package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioBadInput sends malformed and unauthorised requests: each must be
// rejected with the right errno, and the module must keep working.
func scenarioBadInput(*harness.Env) error {
	cg, err := harness.NewCgroup("bad-input")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctl, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()

	cases := []struct {
		name  string
		cmd   uint8
		attrs []byte
		want  unix.Errno
	}{
		{"watch without attributes", kmod.CmdWatch, nil, unix.EINVAL},
		{"watch with u32 cgroup id", kmod.CmdWatch, u32(kmod.AttrCgroupID, uint32(cg.ID)), unix.EINVAL},
		{"watch with u8 cgroup id", kmod.CmdWatch, u8(kmod.AttrCgroupID, 1), unix.EINVAL},
		{"watch of unknown cgroup id", kmod.CmdWatch, u64(kmod.AttrCgroupID, 1<<50), unix.ENOENT},
		{"watch with unknown attribute", kmod.CmdWatch, cat(u64(kmod.AttrCgroupID, cg.ID), u32(200, 1)), unix.EINVAL},
		{"watch with kernel-only attribute", kmod.CmdWatch, cat(u64(kmod.AttrCgroupID, cg.ID), u64(kmod.AttrUsageBytes, 1)), unix.EINVAL},
		{"watch with truncated attribute", kmod.CmdWatch, []byte{12, 0, kmod.AttrCgroupID, 0, 1, 2, 3, 4}, unix.EINVAL},
		{"watch with 60000-byte attribute", kmod.CmdWatch, nlattr(kmod.AttrCgroupID, make([]byte, 60000)), unix.EINVAL},
		{"unwatch of unwatched cgroup", kmod.CmdUnwatch, u64(kmod.AttrCgroupID, cg.ID), unix.ENOENT},
		{"oom reply without verdict", kmod.CmdOOMReply, u64(kmod.AttrRequestID, 1), unix.EINVAL},
		{"oom reply without request id", kmod.CmdOOMReply, u8(kmod.AttrGranted, 1), unix.EINVAL},
		{"oom reply with verdict 2", kmod.CmdOOMReply, cat(u64(kmod.AttrRequestID, 1), u8(kmod.AttrGranted, 2)), unix.ERANGE},
		{"oom reply with u64 verdict", kmod.CmdOOMReply, cat(u64(kmod.AttrRequestID, 1), u64(kmod.AttrGranted, 1)), unix.EINVAL},
		{"oom reply to unknown request", kmod.CmdOOMReply, cat(u64(kmod.AttrRequestID, 1<<60), u8(kmod.AttrGranted, 1)), unix.ENOENT},
		{"unknown command", 99, nil, unix.EOPNOTSUPP},
		{"event command sent to the kernel", kmod.CmdTelemetry, nil, unix.EOPNOTSUPP},
		{"1 MiB message", kmod.CmdWatch, make([]byte, 1<<20), unix.EMSGSIZE},
	}
	bad := 0
	for _, tc := range cases {
		_, err := ctl.Do(tc.cmd, tc.attrs)
		var got unix.Errno
		if !errors.As(err, &got) {
			fmt.Printf("    %-34s got %v, want %v\n", tc.name, err, tc.want)
			bad++
			continue
		}
		ok := got == tc.want
		if !ok {
			bad++
		}
		fmt.Printf("    %-34s %-40v ok=%v\n", tc.name, got, ok)
	}

	// Unprivileged sender: EPERM on every mutating command. Then a sender
	// with CAP_NET_ADMIN alone (genetlink's admin bit): taking a cgroup's
	// OOM verdicts needs CAP_SYS_ADMIN, so it is refused the same way.
	for _, who := range []struct {
		name string
		caps []uintptr
	}{
		{"unprivileged sender", nil},
		{"CAP_NET_ADMIN-only sender", []uintptr{unix.CAP_NET_ADMIN}},
	} {
		args := []string{"unpriv", strconv.FormatUint(cg.ID, 10)}
		if who.caps != nil {
			args = append(args, "net-admin")
		}
		cmd := exec.Command("/proc/self/exe", args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
			AmbientCaps: who.caps,
		}
		if err := cmd.Run(); err != nil {
			fmt.Printf("    %s: %v\n", who.name, err)
			bad++
		} else {
			fmt.Printf("    %s: EPERM on watch/unwatch/oom-reply, stats readable ok=true\n", who.name)
		}
	}

	// Still working after all that.
	if err := ctl.Watch(cg.ID); err != nil {
		return fmt.Errorf("valid watch after bad input: %w", err)
	}
	if err := ctl.Watch(cg.ID); err != nil {
		return fmt.Errorf("second watch of the same cgroup should be accepted: %w", err)
	}
	if err := ctl.Unwatch(cg.ID); err != nil {
		return fmt.Errorf("valid unwatch after bad input: %w", err)
	}
	if bad > 0 {
		return fmt.Errorf("%d bad requests not rejected as expected", bad)
	}
	return nil
}

func nlattr(typ uint16, data []byte) []byte {
	b := make([]byte, 4, 4+len(data)+3)
	binary.LittleEndian.PutUint16(b[0:], uint16(4+len(data)))
	binary.LittleEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u8(typ uint16, v uint8) []byte { return nlattr(typ, []byte{v}) }

func u32(typ uint16, v uint32) []byte {
	return nlattr(typ, binary.LittleEndian.AppendUint32(nil, v))
}

func u64(typ uint16, v uint64) []byte {
	return nlattr(typ, binary.LittleEndian.AppendUint64(nil, v))
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// unpriv runs as an unprivileged user (with "net-admin": holding
// CAP_NET_ADMIN and not CAP_SYS_ADMIN): mutating commands must fail with
// EPERM, reading statistics must work. Exit 0 when both hold.
func unpriv(args []string) int {
	if len(args) > 1 && args[1] == "net-admin" {
		eff, err := effectiveCaps()
		if err != nil {
			fmt.Println("unpriv:", err)
			return 1
		}
		if eff&(1<<unix.CAP_NET_ADMIN) == 0 || eff&(1<<unix.CAP_SYS_ADMIN) != 0 {
			fmt.Printf("unpriv: effective capabilities %#x, want CAP_NET_ADMIN without CAP_SYS_ADMIN\n", eff)
			return 1
		}
	}
	c, err := kmod.Dial()
	if err != nil {
		fmt.Println("unpriv: dial:", err)
		return 1
	}
	defer c.Close()
	rc := 0
	if err := c.Watch(uint64(harness.AtoiArg(args, 0, 1))); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: watch as uid %d: got %v, want EPERM\n", os.Getuid(), err)
		rc = 1
	}
	if err := c.ReplyOOM(1, true); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: oom reply: got %v, want EPERM\n", err)
		rc = 1
	}
	if err := c.Unwatch(1); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: unwatch: got %v, want EPERM\n", err)
		rc = 1
	}
	if _, err := c.Stats(); err != nil {
		fmt.Println("unpriv: stats:", err)
		rc = 1
	}
	// Telemetry tells about every watched cgroup: joining is for admins.
	if err := c.Join(kmod.GroupTelemetry); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: join %q: got %v, want EPERM\n", kmod.GroupTelemetry, err)
		rc = 1
	}
	return rc
}

// effectiveCaps reads this process's effective capability set.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// scenarioOwner: daemon A (its own process) watches a cgroup; daemon B
// cannot take or remove A's watch, gets none of its OOM requests and
// cannot answer them. A is SIGKILLed while a fault waits for its verdict
// (timeout 20 s): the module drops A's watch and the fault takes the OOM
// path at once; then B may watch the cgroup.
func scenarioOwner(*harness.Env) error {
	restore, err := harness.SetOOMTimeout(20000)
	if err != nil {
		return err
	}
	defer restore()
	cg, err := harness.NewCgroup("owner")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("memory.max", strconv.Itoa(32<<20)); err != nil {
		return err
	}
	a := exec.Command("/proc/self/exe", "owner-hold", strconv.FormatUint(cg.ID, 10))
	a.Stderr = os.Stderr
	out, err := lines(a)
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	defer func() { _ = a.Process.Kill(); _ = a.Wait() }()
	if _, err := waitLine(out, "owner-hold: watching", 10*time.Second); err != nil {
		return err
	}

	b, err := kmod.DialOwner()
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Watch(cg.ID); !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("daemon B watching A's cgroup: got %v, want EBUSY", err)
	}
	if err := b.Unwatch(cg.ID); !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("daemon B unwatching A's cgroup: got %v, want EBUSY", err)
	}
	fmt.Println("    B: watch and unwatch of A's cgroup refused with EBUSY")
	st0, err := b.Stats()
	if err != nil {
		return err
	}

	hog, err := cg.Start("hog-mem", "64")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	idStr, err := waitLine(out, "owner-hold: request", 60*time.Second)
	if err != nil {
		return err
	}
	reqID, _ := strconv.ParseUint(idStr, 10, 64)
	select {
	case req := <-b.Requests():
		return fmt.Errorf("daemon B got OOM request %d of A's cgroup", req.ID)
	case <-time.After(500 * time.Millisecond):
	}
	if err := b.ReplyOOM(reqID, true); !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("daemon B answering A's request %d: got %v, want ENOENT", reqID, err)
	}
	fmt.Printf("    request %d went to A only; B's answer refused with ENOENT\n", reqID)

	t0 := time.Now()
	if err := a.Process.Kill(); err != nil {
		return err
	}
	_ = a.Wait()
	ps, err := harness.WaitTimeout(hog, 30*time.Second)
	if err != nil {
		return fmt.Errorf("hog after A died: %w", err)
	}
	d := time.Since(t0)
	fmt.Printf("    A killed: hog %v after %v\n", ps, d.Round(time.Millisecond))
	if !harness.KilledBy(ps, syscall.SIGKILL) {
		return fmt.Errorf("hog: %v, want an OOM kill once its owner died", ps)
	}
	if d > 10*time.Second {
		return fmt.Errorf("the waiting fault was released after %v, not when its owner died", d)
	}
	st1, err := b.Stats()
	if err != nil {
		return err
	}
	if st1.WatchesReleased <= st0.WatchesReleased || st1.Watched >= st0.Watched {
		return fmt.Errorf("daemon A's watch not dropped: released %d -> %d, watched %d -> %d",
			st0.WatchesReleased, st1.WatchesReleased, st0.Watched, st1.Watched)
	}
	if err := b.Watch(cg.ID); err != nil {
		return fmt.Errorf("daemon B watching after A died: %w", err)
	}
	if err := b.Unwatch(cg.ID); err != nil {
		return fmt.Errorf("daemon B unwatching its own watch: %w", err)
	}
	fmt.Printf("    watches released %d -> %d; B now watches and unwatches the cgroup\n", st0.WatchesReleased, st1.WatchesReleased)
	return nil
}

// lines returns a channel of cmd's stdout lines.
func lines(cmd *exec.Cmd) (<-chan string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Println("    |", sc.Text())
			ch <- sc.Text()
		}
	}()
	return ch, nil
}

func waitLine(ch <-chan string, prefix string, d time.Duration) (string, error) {
	t := time.After(d)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				return "", fmt.Errorf("output ended before %q", prefix)
			}
			if strings.HasPrefix(s, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(s, prefix)), nil
			}
		case <-t:
			return "", fmt.Errorf("no %q within %v", prefix, d)
		}
	}
}

// ownerHold is a second daemon: it watches cgroup args[0] through its own
// owner socket, prints every OOM request it gets and answers none.
func ownerHold(args []string) int {
	id, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		fmt.Println("owner-hold:", err)
		return 2
	}
	o, err := kmod.DialOwner()
	if err != nil {
		fmt.Println("owner-hold:", err)
		return 1
	}
	if err := o.Watch(id); err != nil {
		fmt.Println("owner-hold:", err)
		return 1
	}
	fmt.Println("owner-hold: watching")
	for req := range o.Requests() {
		fmt.Printf("owner-hold: request %d\n", req.ID)
	}
	return 0
}
