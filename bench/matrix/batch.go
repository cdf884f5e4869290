package matrix

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/bench/policy"
	"github.com/escra-dev/escra/bench/sampler"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/procstat"
	"github.com/escra-dev/escra/internal/workloadimages"
)

// batchRun is a best-effort CPU spinner co-located with the app under
// test (to show what the capacity a policy frees buys). It gets the
// smallest CPU weight (cpu.shares 2, cpu.idle 1) and a quota equal to the app CPUs
// minus Σ the app's container limits, moved every 100 ms: under Static
// that is what the static reservation leaves; under Escra the unassigned
// pool goes to the batch until Escra raises a quota again.
//
// One container serves every +batch run of a matrix: it is created at the
// first, stopped after each (SIGSTOP to the spinner, one process: all its
// threads stop and it takes no CPU at all), continued (SIGCONT) at the
// next, and removed when the matrix ends.
// Creating and starting a container costs ≈ 1.3 s here, 30 times a quick
// run; a stopped one does not share the CPUs with the plain runs.
type batchRun struct {
	c     Config
	id    string
	g     *cgroups.Group
	mu    sync.Mutex
	quota int64
	idle  bool // cpu.idle set
	t0    time.Time
	u0    uint64
}

// batchHolder keeps a matrix's batch container between its runs.
type batchHolder struct{ b *batchRun }

// resumeBatch continues the matrix's batch container (creating it the
// first time) and starts its CPU count from now.
func (c Config) resumeBatch(ctx context.Context) (*batchRun, error) {
	if c.batch == nil {
		return c.startBatch(ctx)
	}
	if c.batch.b == nil {
		b, err := c.startBatch(ctx)
		if err != nil {
			return nil, err
		}
		c.batch.b = b
		return b, nil
	}
	b := c.batch.b
	if _, err := c.Docker.ContainerKill(ctx, b.id, client.ContainerKillOptions{Signal: "CONT"}); err != nil {
		return nil, fmt.Errorf("continue batch container: %w", err)
	}
	b.t0, b.u0 = time.Now(), b.usageNs()
	return b, nil
}

// suspend stops the batch between its runs (or removes it when the
// matrix keeps none). The quota goes to the floor first, so a container
// that failed to stop still takes next to nothing.
func (b *batchRun) suspend(ctx context.Context) {
	if b.c.batch == nil || b.c.batch.b != b {
		b.close()
		return
	}
	b.follow(ctx, 0)
	if _, err := b.c.Docker.ContainerKill(ctx, b.id, client.ContainerKillOptions{Signal: "STOP"}); err != nil {
		b.c.progress("  batch container not stopped (%v); removing it", err)
		b.close()
		b.c.batch.b = nil
	}
}

func (c Config) startBatch(ctx context.Context) (*batchRun, error) {
	name := "escra-bench-batch"
	c.Docker.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	cr, err := c.Docker.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: c.Images[workloadimages.Spin.Name],
		Cmd: []string{"-threads", strconv.Itoa(max(1, int(math.Ceil(c.AppCores))))}, Labels: map[string]string{"escra.bench": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Resources: container.Resources{CPUShares: 2, CpusetCpus: c.AppCPUs,
			NanoCPUs: int64(0.01 * 1e9)}}, Name: name})
	if err != nil {
		return nil, fmt.Errorf("create batch container: %w", err)
	}
	b := &batchRun{c: c, id: cr.ID}
	if _, err := c.Docker.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		b.close()
		return nil, fmt.Errorf("start batch container: %w", err)
	}
	in, err := c.Docker.ContainerInspect(ctx, cr.ID, client.ContainerInspectOptions{})
	if err != nil {
		b.close()
		return nil, err
	}
	paths, err := cgroups.PathsForPID(in.Container.State.Pid)
	if err != nil {
		b.close()
		return nil, err
	}
	if b.g, err = cgroups.Open(paths); err != nil {
		b.close()
		return nil, err
	}
	// cpu.idle (Linux ≥ 5.15): the batch runs as SCHED_IDLE, so an app
	// task that wakes takes the CPU at once, as a careful operator would
	// set a best-effort job up. Same for every policy; without the file
	// (older kernels) cpu.shares 2 is all there is.
	dir := paths.CPU
	if paths.Version == cgroups.V2 {
		dir = paths.Unified
	}
	b.idle = os.WriteFile(filepath.Join(dir, "cpu.idle"), []byte("1"), 0) == nil
	b.t0, b.u0 = time.Now(), b.usageNs()
	return b, nil
}

func (b *batchRun) usageNs() uint64 {
	ns, _ := sampler.UsageNs(b.g)
	return ns
}

// follow gives the batch what the app's limits leave of the app CPUs.
func (b *batchRun) follow(_ context.Context, freeCores float64) {
	q := max(int64(policy.MinQuotaUs), int64(math.Round(freeCores*policy.CPUPeriodUs)))
	b.mu.Lock()
	defer b.mu.Unlock()
	if q == b.quota {
		return
	}
	if b.g.SetCPULimit(q, policy.CPUPeriodUs) == nil {
		b.quota = q
	}
}

// cores is the batch's mean CPU since it started.
func (b *batchRun) cores() float64 {
	d := time.Since(b.t0).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(b.usageNs()-b.u0) / 1e9 / d
}

func (b *batchRun) close() {
	if b.g != nil {
		b.g.Close()
	}
	b.c.Docker.ContainerRemove(context.Background(), b.id, client.ContainerRemoveOptions{Force: true})
}

// cpuBusy is the busy time (all but idle and iowait) of cpus, in seconds,
// from /proc/stat; 0 when none are given.
func cpuBusy(cpus []int) float64 {
	if len(cpus) == 0 {
		return 0
	}
	m, err := procstat.CPUs()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, c := range cpus {
		total += m[c].Busy
	}
	return total
}

// selfCPU is this process's CPU plus that of its waited-for children
// (wrk, redis-benchmark), in seconds.
func selfCPU() float64 {
	st, err := procstat.Read(os.Getpid())
	if err != nil {
		return 0
	}
	return (st.CPU() + st.ChildrenCPU()).Seconds()
}

func (c Config) clientRun(w Workload, cell Cell, seed int64, progress func(string)) ClientRun {
	return ClientRun{Load: cell.Load, Ports: c.ports(w), Duration: c.Duration, Seed: seed, BurstCycle: c.BurstCycle, Progress: progress}
}
