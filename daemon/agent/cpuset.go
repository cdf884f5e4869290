package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// CPU placement modes (escrad --cpu-placement).
const (
	CPUPlacementHard       = "hard"
	CPUPlacementBestEffort = "besteffort"
	CPUPlacementOff        = "off"
)

// DefaultViewDir holds the per-container CPU views escrad keeps truthful.
const DefaultViewDir = "/run/escra/view"

// cpuMgr is escrad's host CPU allocator (WYSIWYG §IV-B, Algorithm 1,
// internal/wysiwyg), run live: every quota the controller sets for a C1
// container goes through it, and the cpuset writes of the plan it returns
// are made in order around the quota write, so that at no instant a
// container sees fewer cores than its quota needs or shares a P1 core.
type cpuMgr struct {
	log      *slog.Logger
	app      *limits.Applier
	viewDir  string
	profiles string // verdicts of escractl profile --record, for escra.cpu=auto

	mu   sync.Mutex
	host *wysiwyg.Host
	byH  map[uint32]*cpuCtr

	changes []time.Duration // cpuset.cpus write latencies (bench)
}

type cpuCtr struct {
	h      uint32
	name   string
	want   wysiwyg.Class // from the label
	class  wysiwyg.Class // as allocated now
	layout int64         // millicores the C1 cpuset is laid out for
	hy     wysiwyg.Hysteresis
	retry  time.Time // a refused C1 placement is tried again from then on
}

// c1Retry spaces the attempts to place a refused wysiwyg container (one
// log line each), as quotas arrive every period.
const c1Retry = 10 * time.Second

func newCPUMgr(mode string, cores int, app *limits.Applier, viewDir string, log *slog.Logger) (*cpuMgr, error) {
	if mode == CPUPlacementOff {
		return nil, nil
	}
	if mode == "" {
		mode = CPUPlacementHard
	}
	m, err := wysiwyg.ParseMode(mode)
	if err != nil {
		return nil, fmt.Errorf("cpu placement: %w (or off)", err)
	}
	if viewDir == "" {
		viewDir = DefaultViewDir
	}
	return &cpuMgr{log: log, app: app, viewDir: viewDir, profiles: wysiwyg.DefaultProfileDir, host: wysiwyg.NewHost(cores, m), byH: map[uint32]*cpuCtr{}}, nil
}

func hid(h uint32) string { return strconv.FormatUint(uint64(h), 10) }

func handleOf(id string) uint32 {
	v, _ := strconv.ParseUint(id, 10, 32)
	return uint32(v)
}

// toMilli converts a CFS quota into millicores, rounded up (a container
// must see enough cores for all of it); <= 0 for unlimited.
func toMilli(quotaUs int64, periodUs uint32) int64 {
	if quotaUs <= 0 || periodUs == 0 {
		return 0
	}
	return (quotaUs*wysiwyg.Milli + int64(periodUs) - 1) / int64(periodUs)
}

// add places a new container: C1 by Algorithm 1 when labelled wysiwyg (or
// auto, and its image was profiled processor-sensitive: WYSIWYG §IV-C)
// and limited, else in the shared pool. A container whose cpuset its owner
// gave Docker and that carries no escra.cpu label is left alone (make
// bench pins its apps that way). Shared cpusets are not written into
// Docker's view, so after a restart a cpuset there is still the owner's.
func (c *cpuMgr) add(h uint32, ctr containers.Container, cur limits.Current) {
	if ctr.CPU == "" && ctr.Limits.CpusetCpus != "" {
		c.log.Info("cpuset set by its owner and no escra.cpu label: CPU placement leaves it alone", "name", ctr.Name)
		return
	}
	x := &cpuCtr{h: h, name: ctr.Name, want: wysiwyg.C2}
	switch ctr.CPU {
	case containers.CPUWysiwyg:
		x.want = wysiwyg.C1
	case containers.CPUAuto:
		var why string
		x.want, why = wysiwyg.ResolveAuto(c.profiles, ctr.Image)
		c.log.Info("escra.cpu=auto: "+why, "name", ctr.Name, "image", ctr.Image)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byH[h] = x
	r := toMilli(cur.CPUQuotaUs, cur.CPUPeriodUs)
	if x.want == wysiwyg.C1 && r > 0 {
		if err := c.addC1(x, r, nil); err == nil {
			return
		}
		x.retry = time.Now().Add(c1Retry)
	} else if x.want == wysiwyg.C1 {
		c.log.Info("wysiwyg container without a CPU limit: shared until a quota is set", "name", ctr.Name)
	}
	c.addShared(x)
}

// addC1 allocates x as C1; apply writes its own quota at the plan's quota
// step (nil: the quota in place already is r).
func (c *cpuMgr) addC1(x *cpuCtr, r int64, apply func() error) error {
	plan, err := c.host.Add(hid(x.h), wysiwyg.C1, r)
	if err != nil {
		c.log.Error("cannot place container as wysiwyg: placed in the shared pool",
			"name", x.name, "millicores", r, "mode", c.host.Mode, "err", err)
		return err
	}
	x.class, x.layout, x.hy = wysiwyg.C1, r, wysiwyg.Hysteresis{}
	if e := c.app.Get(x.h); e != nil {
		e.NoDockerCPUs.Store(false) // docker inspect shows a C1 cpuset
	}
	return c.run(plan, x.h, apply)
}

func (c *cpuMgr) addShared(x *cpuCtr) {
	plan, err := c.host.Add(hid(x.h), wysiwyg.C2, 1) // C2 quotas do not book (CountShared off)
	if err != nil {
		c.log.Error("no shared CPU left for container: CPU placement leaves it alone", "name", x.name, "err", err)
		delete(c.byH, x.h)
		return
	}
	x.class = wysiwyg.C2
	if e := c.app.Get(x.h); e != nil {
		e.NoDockerCPUs.Store(true)
	}
	_ = c.run(plan, x.h, nil)
}

// remove frees h's cores; the shared pool grows back.
func (c *cpuMgr) remove(h uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byH[h]; !ok {
		return
	}
	delete(c.byH, h)
	_ = c.run(c.host.Remove(hid(h)), h, nil)
}

// manages reports whether a quota for h must go through setQuota.
func (c *cpuMgr) manages(h uint32) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.byH[h]
	return x != nil && x.want == wysiwyg.C1
}

// setQuota applies a controller update u to a C1 container: hysteresis
// picks the layout, Algorithm 1 re-places it if the layout changes, and
// apply (the applier's write of u) runs at the plan's quota step. When
// the new layout cannot be WYSIWYG (principle-hard) the quota is capped
// at what the current cpuset holds, and the error says so.
func (c *cpuMgr) setQuota(u *pb.LimitUpdate, period uint32, apply func(*pb.Limits) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.byH[u.Handle]
	q := u.Limits.GetCpuQuotaUs()
	r := toMilli(q, period)
	if x == nil || r <= 0 {
		return apply(u.Limits)
	}
	lim := u.Limits
	do := func() error { return apply(lim) }
	if x.class == wysiwyg.C2 { // wants C1, had no quota (or no room) so far
		if now := time.Now(); now.Before(x.retry) {
			return apply(lim)
		}
		c.host.Remove(hid(x.h)) // the shared pool is unchanged: no writes
		if err := c.addC1(x, r, do); err != nil {
			x.retry = time.Now().Add(c1Retry)
			c.addShared(x)
			return apply(lim)
		}
		return nil
	}
	target := x.hy.Target(x.layout, r, time.Now())
	if target == x.layout {
		return apply(lim)
	}
	plan, err := c.host.Resize(hid(x.h), target)
	if err != nil {
		if target < x.layout { // a cut never fails in place; keep the layout
			return apply(lim)
		}
		capUs := x.layout * int64(period) / wysiwyg.Milli
		capped := clonedLimits(lim)
		capped.CpuQuotaUs = capUs
		lim = capped
		if aerr := apply(lim); aerr != nil {
			return aerr
		}
		return fmt.Errorf("wysiwyg: quota %d µs capped at %d µs: %w", q, capUs, err)
	}
	x.layout = target
	return c.run(plan, x.h, do)
}

func clonedLimits(l *pb.Limits) *pb.Limits {
	return &pb.Limits{CpuQuotaUs: l.GetCpuQuotaUs(), CpuPeriodUs: l.GetCpuPeriodUs(), MemoryLimitBytes: l.GetMemoryLimitBytes()}
}

// run applies a plan in order; self's quota step calls apply. The first
// failed write stops the plan (the next quota change re-plans from the
// allocator's state; the sampler reports what the files say meanwhile).
func (c *cpuMgr) run(plan wysiwyg.Plan, self uint32, apply func() error) error {
	applied := false
	var errs []error
	for _, s := range plan {
		h := handleOf(s.ID)
		switch s.Kind {
		case wysiwyg.SetCPUs:
			t0 := time.Now()
			err := c.app.SetCPUs(h, s.CPUs.String())
			if err != nil && !errors.Is(err, limits.ErrUnknown) {
				c.log.Warn("cpuset write failed", "handle", h, "cpus", s.CPUs.String(), "err", err)
				errs = append(errs, err)
				return errors.Join(errs...)
			}
			if len(c.changes) < 1<<16 {
				c.changes = append(c.changes, time.Since(t0))
			}
			if x := c.byH[h]; x != nil {
				c.writeView(x.name, s.CPUs)
			}
		case wysiwyg.SetQuota:
			if h == self && apply != nil {
				applied = true
				if err := apply(); err != nil {
					return err
				}
			}
		}
	}
	if !applied && apply != nil {
		return apply()
	}
	return nil
}

// writeView keeps <viewDir>/<name>/online, when it exists, equal to the
// container's cpuset (bind-mounted on /sys/devices/system/cpu/online,
// where glibc's sysconf(_SC_NPROCESSORS_ONLN) counts CPUs). Written in
// place, new text first and the truncation after, so a reader sees either
// list, each ending in a newline. See docs/wysiwyg.md for why not LXCFS's
// own online file.
func (c *cpuMgr) writeView(name string, cpus wysiwyg.CPUSet) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return
	}
	p := filepath.Join(c.viewDir, name, "online")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return // no view requested for this container
	}
	defer f.Close()
	text := cpus.String() + "\n"
	if _, err := f.WriteAt([]byte(text), 0); err == nil {
		_ = f.Truncate(int64(len(text)))
	}
}

// CPUSetChanges returns and clears the cpuset.cpus write latencies.
func (a *Agent) CPUSetChanges() []time.Duration {
	if a.cpu == nil {
		return nil
	}
	a.cpu.mu.Lock()
	defer a.cpu.mu.Unlock()
	out := a.cpu.changes
	a.cpu.changes = nil
	return out
}

// CPUPlacement returns each placed container's class and the P1 cores
// (core → handle), for tests and the invariant sampler.
func (a *Agent) CPUPlacement() (map[uint32]wysiwyg.Class, map[int]uint32) {
	if a.cpu == nil {
		return nil, nil
	}
	a.cpu.mu.Lock()
	defer a.cpu.mu.Unlock()
	cl := map[uint32]wysiwyg.Class{}
	for h, x := range a.cpu.byH {
		cl[h] = x.class
	}
	p1 := map[int]uint32{}
	for core, id := range a.cpu.host.P1() {
		p1[core] = handleOf(id)
	}
	return cl, p1
}

// PrepareView creates <dir>/<name>/online for a container about to be
// started with it bind-mounted on /sys/devices/system/cpu/online; escrad
// rewrites it as the container's cpuset moves. Until escrad has placed
// the container (within a second of its start) the file lists cores
// CPUs (a C1 container's ⌈quota⌉; 0: every online CPU), numbered from the
// top as the allocator picks them, so a program that sizes itself at
// start sees the right count. It returns the file's path.
func PrepareView(dir, name string, cores int) (string, error) {
	if dir == "" {
		dir = DefaultViewDir
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("view for container name %q: not a plain name", name)
	}
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	n := hostCPUs()
	if cores <= 0 || cores > n {
		cores = n
	}
	var set wysiwyg.CPUSet
	for c := n - cores; c < n; c++ {
		set = append(set, c)
	}
	p := filepath.Join(d, "online")
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		// What `docker run -v` made of a missing source: a directory,
		// which runc cannot mount on a file. Empty, it is replaced.
		if err := os.Remove(p); err != nil {
			return "", fmt.Errorf("view %s is a directory, not a file (left by docker run -v before it existed): %w", p, err)
		}
	}
	return p, os.WriteFile(p, []byte(set.String()+"\n"), 0o644)
}

// hostCPUs is the number of CPUs the host has online (the allocator's
// cores are 0..n-1; Docker's parent cpuset covers them all here).
func hostCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err == nil {
		if s, err := wysiwyg.ParseCPUSet(string(b)); err == nil && len(s) > 0 {
			return s[len(s)-1] + 1
		}
	}
	return runtime.NumCPU()
}

// SimulateCPU implements link.CPUPlacer: Algorithm 1 for a container of
// q.Millicores on this host, nothing booked (§IV-D).
func (a *Agent) SimulateCPU(q *pb.CpuPlacementQuery) *pb.CpuPlacementAnswer {
	if a.cpu == nil {
		return &pb.CpuPlacementAnswer{Refused: "CPU placement is off on this host (escrad --cpu-placement off)"}
	}
	class := wysiwyg.C2
	if q.GetWysiwyg() {
		class = wysiwyg.C1
	}
	a.cpu.mu.Lock()
	al, err := a.cpu.host.Simulate(class, int64(q.GetMillicores()))
	a.cpu.mu.Unlock()
	ans := &pb.CpuPlacementAnswer{Enabled: true}
	if err != nil {
		ans.Refused, ans.NotWysiwyg = err.Error(), errors.Is(err, wysiwyg.ErrNotWYSIWYG)
		return ans
	}
	ans.P1Cores, ans.SharedMillicores, ans.CoresSeen = uint32(len(al.P1)), uint32(al.SharedMilli()), uint32(len(al.CPUs()))
	return ans
}
