package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioOOMRoundsDecay: a task's verdict rounds bound one stall, not its
// life, and a child does not inherit them. The handler grants without
// raising memory.max, so each stall spends the faulting task's rounds and
// the OOM killer then kills a ballast process (oom_score_adj 1000) while
// the hog (-1000) carries on:
//
//	A: the hog stalls, spends its rounds; ballast 1 is killed.
//	B: 1.5 s later, same task, same memory.max: it must be asked again
//	   (the rounds decayed); ballast 2 is killed.
//	C: at once, a child the hog forks stalls: it must be asked too (it
//	   starts with no rounds spent); ballast 3 is killed.
func scenarioOOMRoundsDecay(*harness.Env) error {
	f, err := harness.NewOOMCgroup("oom-rounds", 48<<20, 2000)
	if err != nil {
		return err
	}
	defer f.Close()
	cg, ctl := f.Cgroup, f.Owner
	dir, err := os.MkdirTemp("", "oom-rounds")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var ballasts []*exec.Cmd
	defer func() {
		for _, b := range ballasts {
			_ = b.Process.Kill()
			_, _ = b.Process.Wait()
		}
	}()
	// addBallast starts a 24 MiB ballast and waits until it holds it.
	addBallast := func() error {
		before, err := cg.Keyed("memory.stat", "anon")
		if err != nil {
			return err
		}
		b, err := cg.Start("ballast", "24")
		if err != nil {
			return err
		}
		ballasts = append(ballasts, b)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if now, err := cg.Keyed("memory.stat", "anon"); err == nil && now >= before+20<<20 {
				return nil
			}
		}
		return errors.New("ballast did not charge 24 MiB within 20 s")
	}
	if err := addBallast(); err != nil {
		return err
	}
	hog, err := cg.Start("hog-rounds", dir)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	var ps *os.ProcessState
	var waitErr error
	go func() { ps, waitErr = harness.WaitTimeout(hog, 90*time.Second); close(exited) }()

	phase := 'A'
	requests := map[rune]int{}
	var last time.Time
	var forkGap time.Duration
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var stepErr error
loop:
	for {
		select {
		case req := <-ctl.Requests():
			if req.CgroupID != cg.ID {
				continue
			}
			requests[phase]++
			if err := ctl.ReplyOOM(req.ID, true); err != nil && !errors.Is(err, unix.ENOENT) && stepErr == nil {
				stepErr = err
			}
			last = time.Now()
		case <-tick.C:
			switch {
			case phase == 'A' && exists(dir, "a"):
				if stepErr = addBallast(); stepErr != nil {
					break loop
				}
				time.Sleep(time.Until(last.Add(1500 * time.Millisecond)))
				phase = 'B'
				stepErr = touch(dir, "go-b")
			case phase == 'B' && exists(dir, "b"):
				if stepErr = addBallast(); stepErr != nil {
					break loop
				}
				forkGap = time.Since(last)
				phase = 'C'
				stepErr = touch(dir, "go-c")
			}
			if stepErr != nil {
				break loop
			}
		case <-exited:
			break loop
		}
	}
	if stepErr != nil {
		_ = hog.Process.Kill()
		<-exited
		return stepErr
	}
	if waitErr != nil {
		return waitErr
	}
	kills, err := cg.Keyed("memory.events", "oom_kill")
	if err != nil {
		return err
	}
	fmt.Printf("    oom-rounds: requests A %d, B %d, C %d (child forked %v after the last verdict), hog %v, oom_kill %d\n",
		requests['A'], requests['B'], requests['C'], forkGap.Round(time.Millisecond), ps, kills)
	if !ps.Success() {
		return fmt.Errorf("hog %v, want exit 0 (the ballasts are the OOM killer's victims)", ps)
	}
	if requests['A'] == 0 {
		return errors.New("phase A: the module asked nothing")
	}
	if requests['B'] == 0 {
		return errors.New("phase B: the same task stalled 1.5 s after its last verdict and was not asked: its rounds did not decay")
	}
	if requests['C'] == 0 {
		return errors.New("phase C: the forked child was not asked: it inherited its parent's rounds")
	}
	if kills < 3 {
		return fmt.Errorf("oom_kill %d, want 3 (one ballast per stall)", kills)
	}
	if forkGap >= time.Second {
		fmt.Println("    note: the child stalled more than 1 s after the last verdict; decay alone explains its request")
	}
	return nil
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func touch(dir, name string) error {
	return os.WriteFile(filepath.Join(dir, name), nil, 0o644)
}

// setOOMScoreAdj makes this process the OOM killer's first (1000) or last
// (-1000) choice.
func setOOMScoreAdj(v int) error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0o644)
}

// touchMapped maps mib MiB, writes every page and unmaps them: the pages
// are charged while mapped and uncharged at once after.
func touchMapped(mib int) error {
	b, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return unix.Munmap(b)
}

// ballast holds N MiB, first in line for the OOM killer, until killed.
func ballast(args []string) int {
	if err := setOOMScoreAdj(1000); err != nil {
		fmt.Println("ballast:", err)
		return 1
	}
	n := harness.AtoiArg(args, 0, 24)
	b, err := unix.Mmap(-1, 0, n<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("ballast:", err)
		return 1
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	for {
		time.Sleep(time.Hour)
	}
}

// hogRounds runs the three stalls of scenarioOOMRoundsDecay, stepping on
// the scenario's files in DIR; "hog-rounds-child" is phase C's child.
func hogRounds(args []string) int {
	if len(args) < 1 {
		fmt.Println("hog-rounds: want DIR")
		return 2
	}
	dir := args[0]
	fail := func(err error) int { fmt.Println("hog-rounds:", err); return 1 }
	if err := setOOMScoreAdj(-1000); err != nil {
		return fail(err)
	}
	wait := func(name string) error {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if exists(dir, name) {
				return nil
			}
		}
		return fmt.Errorf("no %s within 60 s", name)
	}
	if err := touchMapped(32); err != nil {
		return fail(err)
	}
	if err := touch(dir, "a"); err != nil {
		return fail(err)
	}
	if err := wait("go-b"); err != nil {
		return fail(err)
	}
	if err := touchMapped(32); err != nil {
		return fail(err)
	}
	if err := touch(dir, "b"); err != nil {
		return fail(err)
	}
	if err := wait("go-c"); err != nil {
		return fail(err)
	}
	child := exec.Command("/proc/self/exe", "hog-rounds-child")
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Run(); err != nil {
		return fail(fmt.Errorf("child: %w", err))
	}
	fmt.Println("hog-rounds: three stalls survived")
	return 0
}

func hogRoundsChild([]string) int {
	if err := touchMapped(32); err != nil {
		fmt.Println("hog-rounds-child:", err)
		return 1
	}
	return 0
}
