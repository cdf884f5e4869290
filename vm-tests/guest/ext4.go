package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
)

// ext4Disk is the virtio disk vm-tests/run.sh attaches to the debug
// flavour: an empty ext4 file system made on the host with mkfs.ext4.
const ext4Disk = "/dev/vda"

// scenarioPageCacheOOMExt4 (the debug flavour: ext4 and virtio-blk) is
// pagecache-oom on a real disk file system, where page cache is charged
// under ext4's locks and written back through jbd2 and the block layer.
//
//  1. write(2) of 64 MiB under memory.max 32 MiB: every page-cache charge
//     happens with the inode's i_rwsem held, and the charges must reclaim
//     (memory.events max rises). The owner must get no request: whether
//     reclaim keeps up (writeback) or the OOM path runs, it runs as
//     without the module. An OOM kill of the writer is allowed.
//  2. A 48 MiB file written and dropped from the page cache, then mapped
//     shared, locked on fault (MLOCK_ONFAULT: page cache that reclaim
//     cannot take) and read page by page under 32 MiB: the charges come
//     in user faults (filemap_fault, under mmap_lock and the mapping's
//     invalidate_lock), so the owner is asked, the task waits at the end
//     of the fault, and grants let it finish. Read, not written: a write
//     fault on such a page also runs ext4_page_mkwrite, whose buffer heads
//     are a __GFP_NOFAIL kmem charge; at the limit that charge cannot
//     fail, so the hook does not ask and the memcg OOM killer runs as in
//     the stock kernel (docs/kernel.md, "What the hook does not cover").
//
// Lockdep and the atomic-sleep checks watch both (dmesg-clean runs last).
func scenarioPageCacheOOMExt4(*env) error {
	if !strings.Contains(readProc("/proc/filesystems"), "ext4") {
		return skipError("no ext4 in this kernel (the debug flavour has it)")
	}
	if _, err := os.Stat(ext4Disk); err != nil {
		return skipError("no " + ext4Disk + " (vm-tests/run.sh attaches the ext4 disk to the debug flavour)")
	}
	const dir = "/tmp/ext4"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(ext4Disk, dir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s: %w", ext4Disk, err)
	}
	defer func() {
		unix.Sync()
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	}()
	restore, err := setOOMTimeout(2000)
	if err != nil {
		return err
	}
	defer restore()
	own, err := kmod.DialOwner()
	if err != nil {
		return err
	}
	defer own.Close()

	// 1. write(2): charged with i_rwsem held.
	cg, err := newCgroup("ext4-write")
	if err != nil {
		return err
	}
	defer cg.remove()
	if err := cg.set("memory.max", strconv.Itoa(32<<20)); err != nil {
		return err
	}
	if err := own.Watch(cg.id); err != nil {
		return err
	}
	defer func() { _ = own.Unwatch(cg.id) }()
	max0, _ := cg.keyed("memory.events", "max")
	oom0, _ := cg.keyed("memory.events", "oom")
	kill0, _ := cg.keyed("memory.events", "oom_kill")
	wr, err := cg.start("write-file", dir+"/w", "64")
	if err != nil {
		return err
	}
	ps, err := waitTimeout(wr, 120*time.Second)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	asked := denyPending(own)
	max1, _ := cg.keyed("memory.events", "max")
	oom1, _ := cg.keyed("memory.events", "oom")
	kill1, _ := cg.keyed("memory.events", "oom_kill")
	fmt.Printf("    write(2) of 64 MiB to ext4 under a 32 MiB limit: writer %v, memory.events max +%d, oom +%d, oom_kill +%d, requests to the owner %d\n",
		ps, max1-max0, oom1-oom0, kill1-kill0, asked)
	if asked != 0 {
		return fmt.Errorf("%d OOM requests for charges inside write(2): the task would have waited holding i_rwsem", asked)
	}
	if max1 == max0 {
		return fmt.Errorf("memory.events max +0: the writes never reached memory.max")
	}
	killed := false
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		killed = true
	}
	if !ps.Success() && !(killed && kill1 > kill0) {
		return fmt.Errorf("writer %v (oom_kill +%d): want exit 0, or an OOM kill", ps, kill1-kill0)
	}
	_ = own.Unwatch(cg.id)
	_ = os.Remove(dir + "/w")

	// 2. The file's pages through a shared, lock-on-fault mapping.
	const mb = 48
	if err := writeSynced(dir+"/m", mb); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("drop_caches: %w", err)
	}
	cg2, err := newCgroup("ext4-mmap")
	if err != nil {
		return err
	}
	defer cg2.remove()
	if err := cg2.set("memory.max", strconv.Itoa(32<<20)); err != nil {
		return err
	}
	if err := own.Watch(cg2.id); err != nil {
		return err
	}
	defer func() { _ = own.Unwatch(cg2.id) }()
	var st0 kmod.Stats
	if c, err := kmod.Dial(); err == nil {
		st0, _ = c.Stats()
		c.Close()
	}
	mm, err := cg2.start("mmap-locked", dir+"/m", strconv.Itoa(mb))
	if err != nil {
		return err
	}
	ps, grants, err := grantUntilExit(own, cg2, mm, 120*time.Second)
	if err != nil {
		return fmt.Errorf("mmap toucher: %w", err)
	}
	fmt.Printf("    mlocked shared mmap of a 48 MiB ext4 file, read page by page: %v after %d grants, memory.max %s\n",
		ps, grants, must(cg2.get("memory.max")))
	_ = os.Remove(dir + "/m")
	if !ps.Success() || grants == 0 {
		if c, err := kmod.Dial(); err == nil {
			st1, _ := c.Stats()
			c.Close()
			fmt.Printf("    module: requests +%d, granted +%d, timeouts +%d, unsent +%d\n", st1.OOMRequests-st0.OOMRequests,
				st1.OOMGranted-st0.OOMGranted, st1.OOMTimeouts-st0.OOMTimeouts, st1.OOMUnsent-st0.OOMUnsent)
		}
		printOOMReport()
		return fmt.Errorf("mmap toucher %v after %d grants: want exit 0 after >= 1 grant", ps, grants)
	}
	return nil
}

// denyPending answers "not granted" to the requests already queued on the
// owner socket and returns how many there were.
func denyPending(own *kmod.Owner) int {
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

// grantUntilExit answers every OOM request of the owner by raising cg's
// memory.max 16 MiB above the limit the request saw, then granting, until
// cmd exits (or is killed after d). It returns cmd's state and the grants.
func grantUntilExit(own *kmod.Owner, cg *cgroup, cmd *exec.Cmd, d time.Duration) (*os.ProcessState, int, error) {
	var ps *os.ProcessState
	var err error
	exited := make(chan struct{})
	go func() { ps, err = waitTimeout(cmd, d); close(exited) }()
	grants := 0
	for {
		select {
		case req := <-own.Requests():
			if serr := cg.set("memory.max", strconv.FormatUint(req.MaxBytes+16<<20, 10)); serr != nil {
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

// printOOMReport prints the kernel's last OOM-killer report (who charged
// what, from where), for a scenario that did not expect the kill.
func printOOMReport() {
	log, err := dmesg()
	if err != nil {
		return
	}
	i := strings.LastIndex(log, "invoked oom-killer")
	if i < 0 {
		return
	}
	if j := strings.LastIndex(log[:i], "\n"); j >= 0 {
		i = j + 1
	}
	lines := strings.Split(log[i:], "\n")
	if len(lines) > 60 {
		lines = lines[:60]
	}
	for _, l := range lines {
		fmt.Println("    dmesg:", l)
	}
}

// writeSynced writes mb MiB to path with write(2) and fsync (blocks
// allocated on the disk, so later faults read them back).
func writeSynced(path string, mb int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := 0; i < mb; i++ {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mmapLocked maps the existing file args[0] (args[1] MiB) shared, locks it
// on fault (mlock2 MLOCK_ONFAULT) and reads one byte per page: page-cache
// charges in user faults, for pages reclaim cannot take back. MADV_RANDOM:
// no readahead, so filemap_fault charges each page itself without first
// dropping mmap_lock for the I/O (a fault that drops it is retried, and
// its question withdrawn, instead of ending in VM_FAULT_OOM).
func mmapLocked(args []string) int {
	n := atoiArg(args, 1, 48) << 20
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Println("mmap-locked:", err)
		return 1
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap-locked:", err)
		return 1
	}
	if err := unix.Madvise(b, unix.MADV_RANDOM); err != nil {
		fmt.Println("mmap-locked: madvise:", err)
		return 1
	}
	if _, _, e := unix.Syscall(unix.SYS_MLOCK2, uintptr(unsafe.Pointer(&b[0])), uintptr(n), unix.MLOCK_ONFAULT); e != 0 {
		fmt.Println("mmap-locked: mlock2:", e)
		return 1
	}
	sum := 0
	for i := 0; i < n; i += 4096 {
		sum += int(b[i])
	}
	_ = unix.Munmap(b)
	fmt.Printf("mmap-locked: read %d MiB (sum %d)\n", n>>20, sum)
	return 0
}
