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

	"github.com/escra-dev/escra/vm-tests/harness"
)

// Faults that charge several folios: an mTHP fault that falls back to
// smaller folios, and swap-in readahead. The rule both series hold
// (docs/kernel.md, "OOM semantics, both series": already asked, fail
// fast): once a fault's charge has asked for a verdict, its later charges
// fail without the OOM killer, and the task waits at the end of the fault.
// Without it the fallback charge would reach mem_cgroup_oom() and the
// task would be killed while its verdict is pending.

const thpDir = "/sys/kernel/mm/transparent_hugepage"

// scenarioOOMMTHP: anonymous mTHP (16 kB and 64 kB, one size at a time)
// under memory.max with grants: at the limit the large folio's charge
// fails (THP charges do not reclaim) and the fault falls back to a small
// folio in the same fault, whose charge asks. The hog ends without a
// kill, and the kernel's mTHP counters show both the large folios and the
// charges that fell back.
func scenarioOOMMTHP(*harness.Env) error {
	var sizes []string
	for _, sz := range []string{"16kB", "64kB"} {
		if _, err := os.Stat(filepath.Join(thpDir, "hugepages-"+sz, "enabled")); err == nil {
			sizes = append(sizes, sz)
		}
	}
	if len(sizes) == 0 {
		return harness.Skip("no mTHP sizes in this kernel (6.8 and later, with THP; the debug flavour of 6.12)")
	}
	for _, sz := range sizes {
		if err := oomMTHP(sz); err != nil {
			return fmt.Errorf("%s: %w", sz, err)
		}
	}
	return nil
}

func oomMTHP(size string) error {
	// Only this size: with PMD THP on, the 2 MB folio is tried first and
	// its charge (not asked: above PAGE_ALLOC_COSTLY_ORDER) would take
	// the limit's brunt before the size under test is ever tried.
	all, _ := filepath.Glob(filepath.Join(thpDir, "hugepages-*", "enabled"))
	for _, e := range all {
		old := harness.ReadProc(e)
		mode := "never"
		if filepath.Base(filepath.Dir(e)) == "hugepages-"+size {
			mode = "always"
		}
		if err := os.WriteFile(e, []byte(mode), 0o644); err != nil {
			return err
		}
		defer func() { _ = os.WriteFile(e, []byte(selected(old)), 0o644) }()
	}
	stat := func(name string) uint64 {
		v, _ := strconv.ParseUint(strings.TrimSpace(harness.ReadProc(filepath.Join(thpDir, "hugepages-"+size, "stats", name))), 10, 64)
		return v
	}
	alloc0, fb0 := stat("anon_fault_alloc"), stat("anon_fault_fallback_charge")

	f, err := harness.NewOOMCgroup("oom-mthp-"+size, 32<<20, 2000)
	if err != nil {
		return err
	}
	defer f.Close()
	hog, err := f.Start("hog-mmap", "96", "huge")
	if err != nil {
		return err
	}
	ps, grants, kills, err := grantThrough(f, hog)
	if err != nil {
		return err
	}
	alloc, fb := stat("anon_fault_alloc")-alloc0, stat("anon_fault_fallback_charge")-fb0
	peak, _ := f.Get("memory.peak")
	events, _ := f.Get("memory.events")
	fmt.Printf("    mTHP %s: hog %v, %d grants, oom_kill %d, %d folios of this size faulted, %d charges fell back; memory.peak %s, memory.events %s\n",
		size, ps, grants, kills, alloc, fb, strings.TrimSpace(peak), strings.Join(strings.Fields(events), " "))
	if err := rescuedCleanly(f, ps, grants, kills); err != nil {
		return err
	}
	if alloc == 0 {
		return errors.New("no folio of this size was faulted: mTHP was not exercised")
	}
	if fb == 0 {
		return errors.New("no charge of this size failed at the limit: the fallback was not exercised")
	}
	return nil
}

// selected is the [bracketed] choice of a THP mode file.
func selected(s string) string {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return strings.TrimSpace(s)
}

// scenarioOOMSwap: a swap file on the guest's ext4 disk; a hog pushes
// part of its memory to swap, then swap is capped at what it holds
// (memory.swap.max) and the hog touches everything again, so swap-in
// (with readahead, several folios per fault) charges fail at memory.max
// and ask. With grants the hog ends without a kill.
func scenarioOOMSwap(*harness.Env) error {
	if _, err := os.Stat("/proc/swaps"); err != nil {
		return harness.Skip("no swap in this kernel (CONFIG_SWAP; the debug flavour has it)")
	}
	if _, err := os.Stat(ext4Disk); err != nil {
		return harness.Skip("no disk for a swap file (the debug flavour attaches one)")
	}
	dir, err := os.MkdirTemp("", "swap")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := unix.Mount(ext4Disk, dir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s: %w", ext4Disk, err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	swapFile := filepath.Join(dir, "swapfile")
	for _, c := range [][]string{
		{"dd", "if=/dev/zero", "of=" + swapFile, "bs=1M", "count=96"},
		{"chmod", "600", swapFile},
		{"mkswap", swapFile},
		{"swapon", swapFile},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	defer func() {
		_ = exec.Command("swapoff", swapFile).Run()
		_ = os.Remove(swapFile)
	}()

	f, err := harness.NewOOMCgroup("oom-swap", 32<<20, 2000)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Set("memory.swap.max", "max"); err != nil {
		return err
	}
	goFile := filepath.Join(os.TempDir(), "oom-swap-go")
	_ = os.Remove(goFile)
	defer os.Remove(goFile)
	hog, err := f.Start("hog-mmap", "64", "plain", goFile)
	if err != nil {
		return err
	}
	// Phase 1: 64 MiB under a 32 MiB limit goes partly to swap, no OOM.
	var swapped uint64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v, _ := f.Get("memory.swap.current")
		if swapped, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil && swapped >= 24<<20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if swapped < 24<<20 {
		_ = hog.Process.Kill()
		_, _ = hog.Process.Wait()
		return fmt.Errorf("only %d MiB went to swap: the hog did not push its memory out", swapped>>20)
	}
	// Phase 2: no more room in swap; touching it all again swaps in
	// under the limit, which only a raise can satisfy.
	if err := f.Set("memory.swap.max", strconv.FormatUint(swapped, 10)); err != nil {
		return err
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		return err
	}
	ps, grants, kills, err := grantThrough(f, hog)
	if err != nil {
		return err
	}
	fmt.Printf("    swap: %d MiB swapped out, then capped; hog %v, %d grants, oom_kill %d, memory.max now %s\n",
		swapped>>20, ps, grants, kills, harness.Must(f.Get("memory.max")))
	return rescuedCleanly(f, ps, grants, kills)
}

// grantThrough answers f's OOM requests (raise, then grant) until hog
// exits, and returns its state, the grants and the group's OOM kills.
func grantThrough(f *harness.OOMCgroup, hog *exec.Cmd) (*os.ProcessState, int, uint64, error) {
	ps, grants, err := harness.GrantUntilExit(f.Owner, f.Cgroup, hog, 60*time.Second)
	if err != nil {
		return nil, 0, 0, err
	}
	kills, err := f.Keyed("memory.events", "oom_kill")
	return ps, grants, kills, err
}

// rescuedCleanly: the hog exited 0 with no OOM kill, and the limit bound
// (the kernel asked). A reply can be refused when the raise lets the
// fault's fallback charge through before the verdict: the fault then
// withdraws its question (ENOENT), so the kernel's asks count, not only
// the grants.
func rescuedCleanly(f *harness.OOMCgroup, ps *os.ProcessState, grants int, kills uint64) error {
	if !ps.Success() || kills != 0 {
		return fmt.Errorf("hog %v, oom_kill %d: want exit 0 and no kill", ps, kills)
	}
	if asked, _ := f.Keyed("memory.events", "oom"); asked == 0 && grants == 0 {
		return errors.New("no OOM request: the limit never bound")
	}
	return nil
}

// hogMmap maps args[0] MiB of anonymous memory ("huge": MADV_HUGEPAGE)
// and writes every page. With args[2], it then waits for that file to
// exist and writes every page again (faulting back what went to swap).
func hogMmap(args []string) int {
	n := harness.AtoiArg(args, 0, 64) << 20
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("hog-mmap:", err)
		return 1
	}
	if len(args) > 1 && args[1] == "huge" {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
	// Stores only: a load first would map the zero page, and the write
	// fault after it copies into a small folio whatever mTHP allows.
	pass := byte(0)
	touch := func() {
		pass++
		for i := 0; i < n; i += 4096 {
			b[i] = pass
		}
	}
	touch()
	if len(args) > 2 {
		for {
			if _, err := os.Stat(args[2]); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		touch()
	}
	fmt.Printf("hog-mmap: touched %d MiB\n", n>>20)
	return 0
}
