package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/procstat"
)

// --- make soak FAULTS=1: a randomized fault schedule -----------------------
//
// The partition set-up (controller with a bolt store, two engines, h1's
// escrad in its network namespace, h2's reaching its engine through a
// unix socket proxy, memhogs in both containers) runs for -soak; one fault
// at a time, drawn at random: the controller SIGKILLed (restarted on its
// ports) or SIGSTOPped, h1 partitioned (nft DROP in its namespace), an
// escrad SIGKILLed (restarted) or SIGSTOPped, an escrad's OOM guard
// SIGKILLed, h2's engine hung (its socket holds every byte) or gone
// (connections closed, new ones refused). Measured from the cgroup files
// and /proc: budget violations every 100 ms, every under_oom episode,
// goroutines and fds of each process.

type faultKind struct {
	name string
	run  func(s *soakRun, d time.Duration) error
}

type soakRun struct {
	*hostsSetup
	docker   *gateProxy
	mu       sync.Mutex
	restarts map[string]int
	samples  map[string][]procSample // role -> samples
	faults   []faultLog
}

type faultLog struct {
	kind       string
	start, end time.Time
}

type procSample struct {
	pid        int
	at         time.Time
	goroutines float64 // from /metrics (0: not exported)
	threads    int
	fds        int
}

func threadsOf(pid int) int {
	st, _ := procstat.Read(pid)
	return st.NumThreads
}

var faultKinds = []faultKind{
	{"controller_sigkill", func(s *soakRun, d time.Duration) error {
		s.c.p.kill()
		s.c.p.cmd.Process.Wait()
		time.Sleep(d)
		return s.restartController()
	}},
	{"controller_sigstop", func(s *soakRun, d time.Duration) error { return pause(s.c.p, d) }},
	{"partition_h1", func(s *soakRun, d time.Duration) error {
		if err := s.cut(); err != nil {
			return err
		}
		time.Sleep(d)
		return s.heal()
	}},
	{"escrad_sigkill", func(s *soakRun, d time.Duration) error {
		i := rand.N(2)
		s.escrad[i].kill()
		s.escrad[i].cmd.Process.Wait()
		time.Sleep(d)
		return s.restartEscrad(i)
	}},
	{"escrad_sigstop", func(s *soakRun, d time.Duration) error { return pause(s.escrad[rand.N(2)], d) }},
	{"guard_sigkill", func(s *soakRun, d time.Duration) error {
		pid := guardOf(s.escrad[rand.N(2)].cmd.Process.Pid)
		if pid == 0 {
			return errors.New("no OOM guard found")
		}
		return syscall.Kill(pid, syscall.SIGKILL)
	}},
	{"docker_hung", func(s *soakRun, d time.Duration) error { s.docker.cut(); time.Sleep(d); s.docker.heal(); return nil }},
	{"docker_gone", func(s *soakRun, d time.Duration) error {
		s.docker.setDown(true)
		time.Sleep(d)
		s.docker.setDown(false)
		return nil
	}},
}

func pause(p *proc, d time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// guardOf finds escrad pid's OOM guard child.
func guardOf(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procstat.Read(c); err != nil || st.PPID != pid {
			continue
		}
		if cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); strings.Contains(string(cl), "oom-guard") {
			return c
		}
	}
	return 0
}

func (s *soakRun) restartController() error {
	args := append(append([]string(nil), s.ctlArgs...), "--listen", s.c.sessions, "--admin-listen", s.c.admn)
	var err error
	for range 10 {
		var c *ctl
		if c, err = startController("soak-controller", args...); err == nil {
			s.c.p = c.p
			s.count("controller")
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}

func (s *soakRun) restartEscrad(i int) error {
	s.budget.restored[i].Store(false) // the new escrad takes the group over
	for range 20 {
		p, err := startWith(fmt.Sprintf("soak-escrad-h%d", i+1), "", s.budget.watch(i), s.escradArgs[i]...)
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		if p.cmd.ProcessState == nil && p.cmd.Process.Signal(syscall.Signal(0)) == nil {
			s.escrad[i] = p
			s.count(fmt.Sprintf("escrad-h%d", i+1))
			return nil
		}
	}
	return fmt.Errorf("escrad h%d does not stay up", i+1)
}

func (s *soakRun) count(role string) {
	s.mu.Lock()
	s.restarts[role]++
	s.mu.Unlock()
}

// sampleProcs records goroutines (from /metrics) and open fds (from
// /proc) of the controller and both escrads.
func (s *soakRun) sampleProcs() {
	roles := map[string]*proc{"controller": s.c.p, "escrad-h1": s.escrad[0], "escrad-h2": s.escrad[1]}
	for role, p := range roles {
		pid := p.cmd.Process.Pid
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		var g float64
		if role == "controller" {
			g = metricOf(s.admin, "https://"+s.c.admn+"/metrics", "go_goroutines")
		} else {
			i := int(role[len(role)-1] - '1')
			g = metricOf(s.mclient[i], "http://"+s.metrics[i]+"/metrics", "go_goroutines")
		}
		if Stopped(pid) {
			continue // paused by the schedule: its figures are from before
		}
		s.mu.Lock()
		s.samples[role] = append(s.samples[role], procSample{pid: pid, at: time.Now(), goroutines: g, threads: threadsOf(pid), fds: len(ents)})
		s.mu.Unlock()
	}
}

func soak(d time.Duration, seed uint64) error {
	sock := filepath.Join(tmp, "docker.sock")
	docker, err := newUnixProxy(sock, sockPath(engines[1].host))
	if err != nil {
		return err
	}
	defer docker.close()
	hs, err := setupHosts("soak", nil, func(i int) []string {
		if i == 1 { // h2 reaches its engine through the proxy
			return []string{"--docker-host", "unix://" + sock}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s := &soakRun{hostsSetup: hs, docker: docker, restarts: map[string]int{}, samples: map[string][]procSample{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.budget.run(ctx)
	var hmu sync.Mutex
	runs, kills := [2]int{}, [2]int{}
	for i := range s.ctrs {
		go hogLoop(ctx, s.ctrs[i], pHogMiB, &runs[i], &kills[i], &hmu)
	}
	epsc := make(chan []episode, 1)
	go func() { epsc <- oomWatch(ctx, s.groups[:]) }()
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.sampleProcs()
			}
		}
	}()
	rng := rand.New(rand.NewPCG(seed, seed))
	say("soak: %v of random faults (seed %d), one at a time, 1–8 s each, 3–10 s apart", d, seed)
	time.Sleep(10 * time.Second)
	s.sampleProcs()
	t0 := time.Now()
	var ferrs []string
	for time.Since(t0) < d {
		k := faultKinds[rng.IntN(len(faultKinds))]
		fd := time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))
		f := faultLog{kind: k.name, start: time.Now()}
		if err := k.run(s, fd); err != nil {
			ferrs = append(ferrs, k.name+": "+err.Error())
			say("soak: %s: %v", k.name, err)
		}
		f.end = time.Now()
		s.mu.Lock()
		s.faults = append(s.faults, f)
		n := len(s.faults)
		s.mu.Unlock()
		if n%10 == 0 {
			say("soak: %v, %d faults", time.Since(t0).Round(time.Second), n)
		}
		time.Sleep(3*time.Second + time.Duration(rng.Int64N(int64(7*time.Second))))
	}
	// Heal everything and let the last fault's effects settle (a restored
	// escrad rejoins), then the end samples.
	time.Sleep(15 * time.Second)
	s.sampleProcs()
	cancel()
	eps := <-epsc
	return s.report(eps, t0, ferrs, runs, kills)
}

func (s *soakRun) report(eps []episode, t0 time.Time, ferrs []string, runs, kills [2]int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byKind := map[string]int{}
	for _, f := range s.faults {
		byKind[f.kind]++
	}
	summary["soak_s"] = round(time.Since(t0).Seconds())
	summary["faults_total"] = len(s.faults)
	for _, k := range faultKinds {
		summary["faults_"+k.name] = byKind[k.name]
	}
	summary["fault_errors"] = len(ferrs)
	// OOM episodes: the longest, and those over 300 ms with the fault in
	// force when they began.
	var all []float64
	long := 0
	for _, e := range eps {
		all = append(all, e.ms())
		if e.ms() > 300 {
			long++
			say("soak: task under OOM %.0f ms in %s from %s (fault: %s)", e.ms(), filepath.Base(e.group), e.start.UTC().Format("15:04:05.000"), s.faultAt(e.start))
		}
	}
	sort.Float64s(all)
	summary["oom_episodes"] = len(all)
	summary["oom_episodes_over_300ms"] = long
	summary["oom_episode_max_ms"] = ms(pct(all, 100))
	summary["oom_episode_p99_ms"] = ms(pct(all, 99))
	summary["hog_runs"] = runs[0] + runs[1]
	summary["hogs_oom_killed"] = kills[0] + kills[1]
	s.budget.mu.Lock()
	summary["budget_violations"] = len(s.budget.violAt)
	summary["budget_violations_cpu"], summary["budget_violations_memory"] = s.budget.cpuViol, s.budget.memViol
	ws := s.budget.windows()
	summary["budget_violation_windows"] = len(ws)
	cause := map[string]int{}
	for _, w := range ws {
		f := s.faultAt(w.start)
		cause[strings.Fields(f)[0]] += w.samples
		say("soak: over budget %s–%s (%d samples; first %s); fault: %s", w.start.UTC().Format("15:04:05.000"), w.end.UTC().Format("15:04:05.000"), w.samples, w.what, f)
	}
	for k, n := range cause {
		summary["budget_violations_during_"+k] = n
	}
	summary["budget_violations_incl_restored_groups"] = s.budget.allViol
	summary["budget_samples"] = s.budget.samples
	if s.budget.firstViol != "" {
		say("soak: budget exceeded in the cgroup files: first %s; last %s", s.budget.firstViol, s.budget.lastVio)
	}
	s.budget.mu.Unlock()
	for role, n := range s.restarts {
		summary["restarts_"+role] = n
	}
	// Flat goroutines and fds: for each role, the process that lived
	// longest, its first sample against its last.
	for role, ss := range s.samples {
		byPid := map[int][]procSample{}
		for _, x := range ss {
			byPid[x.pid] = append(byPid[x.pid], x)
		}
		var best []procSample
		for _, v := range byPid {
			if len(v) > len(best) || len(v) == len(best) && len(v) > 0 && v[0].at.Before(best[0].at) {
				best = v
			}
		}
		if len(best) < 2 {
			continue
		}
		a, b := best[0], best[len(best)-1]
		key := strings.ReplaceAll(role, "-", "_")
		summary[key+"_lived_s"] = round(b.at.Sub(a.at).Seconds())
		summary[key+"_goroutines_first"], summary[key+"_goroutines_last"] = a.goroutines, b.goroutines
		summary[key+"_fds_first"], summary[key+"_fds_last"] = a.fds, b.fds
		summary[key+"_threads_first"], summary[key+"_threads_last"] = a.threads, b.threads
		// Flat: the last sample within a few of the first (a scrape,
		// a session's reader and writer come and go); goroutines from
		// go_goroutines on /metrics (escrad's registry has the Go
		// collector too), fds from /proc.
		flat := func(x, y float64) bool { return y-x <= max(5, 0.1*x) }
		gFlat := a.goroutines > 0 && flat(a.goroutines, b.goroutines)
		fFlat := flat(float64(a.fds), float64(b.fds))
		summary[key+"_goroutines_flat"], summary[key+"_fds_flat"] = gFlat, fFlat
		say("soak: %s pid %d over %v: goroutines %.0f → %.0f (flat %v), threads %d → %d, fds %d → %d (flat %v)", role, a.pid, b.at.Sub(a.at).Round(time.Second),
			a.goroutines, b.goroutines, gFlat, a.threads, b.threads, a.fds, b.fds, fFlat)
	}
	say("soak: %d faults (%v), %d OOM episodes (max %.0f ms, %d over 300 ms), budget violations %v of %v samples",
		len(s.faults), byKind, len(all), pct(all, 100), long, summary["budget_violations"], summary["budget_samples"])
	return nil
}

// faultAt names the fault in force at t (or the one that ended within the
// 5 s before it: a restarted process rejoins within that).
func (s *soakRun) faultAt(t time.Time) string {
	for i := len(s.faults) - 1; i >= 0; i-- {
		f := s.faults[i]
		if !t.Before(f.start) && t.Before(f.end.Add(5*time.Second)) {
			return fmt.Sprintf("%s %s–%s", f.kind, f.start.UTC().Format("15:04:05"), f.end.UTC().Format("15:04:05"))
		}
	}
	return "none"
}

var metricErrOnce sync.Once

// metricOf reads one unlabelled sample from a /metrics page (0: none).
func metricOf(c *http.Client, url, name string) float64 {
	if c == nil {
		c = &http.Client{Timeout: 2 * time.Second}
	}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		metricErrOnce.Do(func() { say("soak: %s: %s (goroutines not read)", url, resp.Status) })
		return 0
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// Stopped reports whether pid is stopped (SIGSTOP).
func Stopped(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.Stopped()
}
