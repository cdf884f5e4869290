package pema

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/pemaapp"
)

// Group reads one container's CPU quota and usage from its cgroup (v1 or
// v2): what every policy's allocation is measured by, whoever set it.
type Group struct {
	Name string
	ID   string
	p    cgroups.Paths
}

// Groups resolves the running containers' cgroups.
func Groups(ctx context.Context, cli *client.Client, r *pemaapp.Running) ([]*Group, error) {
	var out []*Group
	for i, id := range r.IDs {
		j, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return nil, err
		}
		p, err := cgroups.PathsForPID(j.Container.State.Pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Names[i], err)
		}
		out = append(out, &Group{Name: r.Names[i], ID: id, p: p})
	}
	return out, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// QuotaCores is the CPU limit in cores (0: unlimited).
func (g *Group) QuotaCores() (float64, error) {
	if g.p.Version == cgroups.V2 {
		b, err := os.ReadFile(filepath.Join(g.p.Unified, "cpu.max"))
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] == "max" {
			return 0, nil
		}
		q, _ := strconv.ParseFloat(f[0], 64)
		p, _ := strconv.ParseFloat(f[1], 64)
		return q / p, nil
	}
	q, err := readInt(filepath.Join(g.p.CPU, "cpu.cfs_quota_us"))
	if err != nil || q <= 0 {
		return 0, err
	}
	p, err := readInt(filepath.Join(g.p.CPU, "cpu.cfs_period_us"))
	if err != nil || p <= 0 {
		return 0, err
	}
	return float64(q) / float64(p), nil
}

// UsageNs is the cumulative CPU time used.
func (g *Group) UsageNs() (int64, error) {
	if g.p.Version == cgroups.V2 {
		b, err := os.ReadFile(filepath.Join(g.p.Unified, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				return n * 1000, err
			}
		}
		return 0, fmt.Errorf("%s: no usage_usec", g.Name)
	}
	return readInt(filepath.Join(g.p.CPUAcct, "cpuacct.usage"))
}

// SetQuota sets the limit through Docker (RULE and OPTM act as an
// operator or a VPA would: not through escra).
func SetQuota(ctx context.Context, cli *client.Client, id string, cores float64) error {
	_, err := SetQuotaPeriod(ctx, cli, id, cores, 100000)
	return err
}

// SetQuotaPeriod sets cores under a CFS period of periodUs and returns
// the cores set: the kernel's smallest quota is 1 ms per period, so a
// short period lifts a small limit.
func SetQuotaPeriod(ctx context.Context, cli *client.Client, id string, cores float64, periodUs int64) (float64, error) {
	q := max(1000, int64(cores*float64(periodUs)))
	_, err := cli.ContainerUpdate(ctx, id, client.ContainerUpdateOptions{Resources: &container.Resources{CPUPeriod: periodUs, CPUQuota: q}})
	return float64(q) / float64(periodUs), err
}

// SetQuotaBurst sets g's limit through Docker under a CFS period of
// periodUs with a CFS burst of burst × the quota, and returns the cores
// set. The kernel refuses a quota below the burst, so the burst is
// dropped first and set again after.
func SetQuotaBurst(ctx context.Context, cli *client.Client, g *Group, cores float64, periodUs int64, burst float64) (float64, error) {
	if err := g.SetBurst(0); err != nil {
		return 0, err
	}
	set, err := SetQuotaPeriod(ctx, cli, g.ID, cores, periodUs)
	if err != nil || burst == 0 {
		return set, err
	}
	return set, g.SetBurst(burst)
}

// Tick is one sample of every container: quota and usage over the last
// sample period, in cores.
type Tick struct {
	At    time.Duration
	Quota []float64
	Usage []float64
}

// Sampler samples the groups every period.
type Sampler struct {
	Groups []*Group
	mu     sync.Mutex
	ticks  []Tick
}

// Ticks returns the samples so far.
func (s *Sampler) Ticks() []Tick {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Tick(nil), s.ticks...)
}

// Run samples until ctx ends; start is the run's zero.
func (s *Sampler) Run(ctx context.Context, start time.Time, period time.Duration) {
	last := make([]int64, len(s.Groups))
	lastT := time.Now()
	for i, g := range s.Groups {
		last[i], _ = g.UsageNs()
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		tk := Tick{At: now.Sub(start), Quota: make([]float64, len(s.Groups)), Usage: make([]float64, len(s.Groups))}
		for i, g := range s.Groups {
			tk.Quota[i], _ = g.QuotaCores()
			u, err := g.UsageNs()
			if err == nil {
				tk.Usage[i] = float64(u-last[i]) / float64(now.Sub(lastT).Nanoseconds())
				last[i] = u
			}
		}
		lastT = now
		s.mu.Lock()
		s.ticks = append(s.ticks, tk)
		s.mu.Unlock()
	}
}

// SetBurst lets the group carry frac × its quota of unused runtime into
// later periods (cgroups.CPUBurst, Linux ≥ 5.14). The kernel refuses a
// burst above the quota, so frac is in [0, 1].
func (g *Group) SetBurst(frac float64) error {
	if !(frac >= 0 && frac <= 1) {
		return fmt.Errorf("%s: burst fraction %v outside [0, 1]", g.Name, frac)
	}
	cg, err := cgroups.Open(g.p)
	if err != nil {
		return err
	}
	defer cg.Close()
	if !cg.Has(cgroups.CPUBurst) {
		if frac == 0 {
			return nil // no burst on this kernel: nothing to clear
		}
		return fmt.Errorf("%s: no CFS burst on this kernel", g.Name)
	}
	q, _, err := cg.CPULimit()
	if err != nil {
		return err
	}
	b := int64(0)
	if q > 0 {
		b = int64(frac * float64(q))
	}
	if err := cg.WriteInt(cgroups.CPUBurst, b); err != nil {
		return fmt.Errorf("%s: %w", g.Name, err)
	}
	return nil
}

// SetCpuset pins a container to cpus.
func SetCpuset(ctx context.Context, cli *client.Client, id, cpus string) error {
	_, err := cli.ContainerUpdate(ctx, id, client.ContainerUpdateOptions{Resources: &container.Resources{CpusetCpus: cpus}})
	return err
}
