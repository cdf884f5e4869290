package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioPageCacheOOM (kernels with tmpfs: the debug flavour). Page cache
// charged inside write(2) - with i_rwsem held - must never wait for a
// verdict: the owner gets no request and the OOM path runs as without the
// module. The same kind of pages touched through mmap are charged in a
// user fault: the request comes, a grant lets the toucher finish. Lockdep
// and the atomic-sleep checks watch both (dmesg-clean).
func scenarioPageCacheOOM(*harness.Env) error {
	if !strings.Contains(harness.ReadProc("/proc/filesystems"), "tmpfs") {
		return harness.Skip("no tmpfs in this kernel (the debug flavour has it)")
	}
	const dir = "/tmp/pc"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256m"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	f, err := harness.NewOOMCgroup("pc-oom", 32<<20, 2000)
	if err != nil {
		return err
	}
	defer f.Close()
	cg, own := f.Cgroup, f.Owner

	// 1. write(2): charged with i_rwsem held.
	oom0, _ := cg.Keyed("memory.events", "oom")
	wr, err := cg.Start("write-file", dir+"/w", "64")
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(wr, 60*time.Second)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	asked := harness.DenyPending(own)
	oom1, _ := cg.Keyed("memory.events", "oom")
	fmt.Printf("    write(2) of 64 MiB to tmpfs under a 32 MiB limit: writer %v, memory.events oom +%d, requests to the owner %d\n", ps, oom1-oom0, asked)
	if asked != 0 {
		return fmt.Errorf("%d OOM requests for charges inside write(2): the task would have waited holding i_rwsem", asked)
	}
	if ps.Success() || oom1 == oom0 {
		return fmt.Errorf("writer %v, oom events +%d: the OOM path did not run", ps, oom1-oom0)
	}
	_ = os.Remove(dir + "/w")

	// 2. The same pages through mmap: a user fault, so the task asks and
	// waits at the end of the fault.
	mm, err := cg.Start("mmap-file", dir+"/m", "48")
	if err != nil {
		return err
	}
	ps, grants, err := harness.GrantUntilExit(own, cg, mm, 60*time.Second)
	if err != nil {
		return fmt.Errorf("mmap toucher: %w", err)
	}
	fmt.Printf("    mmap touch of 48 MiB of tmpfs: %v after %d grants, memory.max %s\n", ps, grants, harness.Must(cg.Get("memory.max")))
	_ = os.Remove(dir + "/m")
	if !ps.Success() || grants == 0 {
		return fmt.Errorf("mmap toucher %v after %d grants: want exit 0 after >= 1 grant", ps, grants)
	}
	return nil
}

// writeFile writes args[1] MiB to the file args[0] with write(2).
func writeFile(args []string) int {
	f, err := os.Create(args[0])
	if err != nil {
		fmt.Println("write-file:", err)
		return 1
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 1
	}
	for i := 0; i < harness.AtoiArg(args, 1, 64); i++ {
		if _, err := f.Write(buf); err != nil {
			fmt.Println("write-file:", err)
			return 1
		}
	}
	return 0
}

// mmapFile maps args[1] MiB of the file args[0] shared and touches every
// page: the charges happen in user page faults.
func mmapFile(args []string) int {
	n := harness.AtoiArg(args, 1, 48) << 20
	f, err := os.Create(args[0])
	if err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	defer f.Close()
	if err := f.Truncate(int64(n)); err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	_ = unix.Munmap(b)
	fmt.Printf("mmap-file: touched %d MiB\n", n>>20)
	return 0
}

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
func scenarioPageCacheOOMExt4(*harness.Env) error {
	if !strings.Contains(harness.ReadProc("/proc/filesystems"), "ext4") {
		return harness.Skip("no ext4 in this kernel (the debug flavour has it)")
	}
	if _, err := os.Stat(ext4Disk); err != nil {
		return harness.Skip("no " + ext4Disk + " (vm-tests/run.sh attaches the ext4 disk to the debug flavour)")
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
	// 1. write(2): charged with i_rwsem held.
	f, err := harness.NewOOMCgroup("ext4-write", 32<<20, 2000)
	if err != nil {
		return err
	}
	defer f.Close()
	cg, own := f.Cgroup, f.Owner
	max0, _ := cg.Keyed("memory.events", "max")
	oom0, _ := cg.Keyed("memory.events", "oom")
	kill0, _ := cg.Keyed("memory.events", "oom_kill")
	wr, err := cg.Start("write-file", dir+"/w", "64")
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(wr, 120*time.Second)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	asked := harness.DenyPending(own)
	max1, _ := cg.Keyed("memory.events", "max")
	oom1, _ := cg.Keyed("memory.events", "oom")
	kill1, _ := cg.Keyed("memory.events", "oom_kill")
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
	_ = own.Unwatch(cg.ID)
	_ = os.Remove(dir + "/w")

	// 2. The file's pages through a shared, lock-on-fault mapping.
	const mb = 48
	if err := writeSynced(dir+"/m", mb); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("drop_caches: %w", err)
	}
	f2, err := harness.NewOOMCgroup("ext4-mmap", 32<<20, 0) // oom_timeout_ms set above
	if err != nil {
		return err
	}
	defer f2.Close()
	cg2 := f2.Cgroup
	var st0 kmod.Stats
	if c, err := kmod.Dial(); err == nil {
		st0, _ = c.Stats()
		c.Close()
	}
	mm, err := cg2.Start("mmap-locked", dir+"/m", strconv.Itoa(mb))
	if err != nil {
		return err
	}
	ps, grants, err := harness.GrantUntilExit(f2.Owner, cg2, mm, 120*time.Second)
	if err != nil {
		return fmt.Errorf("mmap toucher: %w", err)
	}
	fmt.Printf("    mlocked shared mmap of a 48 MiB ext4 file, read page by page: %v after %d grants, memory.max %s\n",
		ps, grants, harness.Must(cg2.Get("memory.max")))
	_ = os.Remove(dir + "/m")
	if !ps.Success() || grants == 0 {
		if c, err := kmod.Dial(); err == nil {
			st1, _ := c.Stats()
			c.Close()
			fmt.Printf("    module: requests +%d, granted +%d, timeouts +%d, unsent +%d\n", st1.OOMRequests-st0.OOMRequests,
				st1.OOMGranted-st0.OOMGranted, st1.OOMTimeouts-st0.OOMTimeouts, st1.OOMUnsent-st0.OOMUnsent)
		}
		harness.PrintOOMReport()
		return fmt.Errorf("mmap toucher %v after %d grants: want exit 0 after >= 1 grant", ps, grants)
	}
	return nil
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
	n := harness.AtoiArg(args, 1, 48) << 20
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
