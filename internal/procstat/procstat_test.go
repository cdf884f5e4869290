package procstat

import (
	"errors"
	iofs "io/fs"
	"os"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

func testFS(t *testing.T) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// The command name holds spaces, parentheses and what looks like a state
// and a PPID: only a split at the last ')' finds the real fields.
func TestReadSplitsAtTheLastParenthesis(t *testing.T) {
	s, err := readIn(testFS(t), 4242)
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{Comm: "a) (b c) S 99 (d", State: 'S', PPID: 1, NumThreads: 2,
		UTime: 123, STime: 45, CUTime: 6, CSTime: 7, StartTime: 98765}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if s.CPUTicks() != 168 || s.CPU() != 1680*time.Millisecond || s.ChildrenCPU() != 130*time.Millisecond {
		t.Errorf("CPU: %d ticks, %v, children %v", s.CPUTicks(), s.CPU(), s.ChildrenCPU())
	}
	if s.Stopped() || s.Zombie() {
		t.Errorf("state S: stopped %v, zombie %v", s.Stopped(), s.Zombie())
	}
}

func TestThreadsReadsEveryTask(t *testing.T) {
	ts, err := threads(testFS(t), 4242)
	if err != nil {
		t.Fatal(err)
	}
	comms := map[string]byte{}
	for _, s := range ts {
		comms[s.Comm] = s.State
		if !s.Stopped() {
			t.Errorf("thread %q in state %c: not stopped", s.Comm, s.State)
		}
	}
	if len(ts) != 2 || comms["a) (b c) S 99 (d"] != 'T' || comms["worker 1"] != 't' {
		t.Fatalf("threads: %+v", ts)
	}
}

func TestStates(t *testing.T) {
	for _, c := range []struct {
		state           byte
		stopped, zombie bool
	}{{'R', false, false}, {'S', false, false}, {'D', false, false}, {'T', true, false}, {'t', true, false}, {'Z', false, true}} {
		s := Stat{State: c.state}
		if s.Stopped() != c.stopped || s.Zombie() != c.zombie {
			t.Errorf("%c: stopped %v zombie %v, want %v %v", c.state, s.Stopped(), s.Zombie(), c.stopped, c.zombie)
		}
	}
}

func TestReadSelf(t *testing.T) {
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PPID != os.Getppid() || s.Comm == "" || s.NumThreads < 1 || s.StartTime == 0 || (s.State != 'R' && s.State != 'S') {
		t.Fatalf("self: %+v (ppid %d)", s, os.Getppid())
	}
	ts, err := Threads(os.Getpid())
	if err != nil || len(ts) < 1 {
		t.Fatalf("threads of self: %d, %v", len(ts), err)
	}
}

func TestReadGoneProcess(t *testing.T) {
	// Above any pid_max (at most 2^22): no such process.
	if _, err := Read(1 << 30); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("got %v, want not-exist", err)
	}
	if _, err := Threads(1 << 30); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("threads: got %v, want not-exist", err)
	}
}

func TestCPUsSplitsBusyFromIdle(t *testing.T) {
	m, err := cpusIn(testFS(t))
	if err != nil {
		t.Fatal(err)
	}
	// USER_HZ ticks: cpu0 busy 100+10+50+5+3+1, idle 2500+25.
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if len(m) != 2 || !near(m[0].Busy, 1.69) || !near(m[0].Idle, 25.25) || !near(m[1].Busy, 2.67) || !near(m[1].Idle, 25.25) {
		t.Fatalf("%+v", m)
	}
}

func TestCPUsOfThisHost(t *testing.T) {
	m, err := CPUs()
	if err != nil || len(m) == 0 {
		t.Fatalf("%d CPUs, %v", len(m), err)
	}
	if c, ok := m[0]; !ok || c.Busy <= 0 || c.Idle < 0 {
		t.Fatalf("cpu0: %+v", m[0])
	}
}
