package limits

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// Updater is the part of the Docker client the reconciler uses.
type Updater interface {
	ContainerUpdate(ctx context.Context, id string, cfg container.UpdateConfig) (container.UpdateResponse, error)
}

// Reconciler tells Docker about limits the fast path already wrote, so
// docker inspect (and a later docker restart) agrees with the cgroup. It
// batches marks for Window (docker update costs a runc run, tens of ms
// of CPU, so an OOM storm must not turn into a docker update storm), retries failures with backoff, and re-writes
// the cgroup when a newer fast-path change raced with a docker update (runc
// would otherwise have written the older values back).
type Reconciler struct {
	A      *Applier
	Docker Updater
	Log    *slog.Logger
	Window time.Duration // batching window (default DefaultReconcileWindow)

	mu    sync.Mutex
	dirty map[uint32]int // handle -> failed attempts so far
	kick  chan struct{}

	Updates atomic.Uint64
	Errors  atomic.Uint64
}

// DefaultReconcileWindow batches Docker's view for five seconds. A quota
// moves several times a second, and each docker update runs runc
// (milliseconds of dockerd, containerd and runc CPU): at 250 ms three busy
// containers meant a dozen runc runs a second and starved escrad's own
// telemetry on a loaded 2-core host (TestE2EDeployAcrossThreeHosts under
// two busy loops); at 1 s they still cost the benchmark's chain cell three
// a second. docker inspect lags the cgroup by at most this much; the
// cgroup, escractl get and /metrics are current.
const DefaultReconcileWindow = 5 * time.Second

// Mark queues h; it never blocks.
func (r *Reconciler) Mark(h uint32) {
	r.mu.Lock()
	if r.dirty == nil {
		r.dirty = map[uint32]int{}
	}
	if _, ok := r.dirty[h]; !ok {
		r.dirty[h] = 0
	}
	r.mu.Unlock()
	select {
	case r.kicker() <- struct{}{}:
	default:
	}
}

func (r *Reconciler) kicker() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kick == nil {
		r.kick = make(chan struct{}, 1)
	}
	return r.kick
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	win := r.Window
	if win <= 0 {
		win = DefaultReconcileWindow
	}
	kick := r.kicker()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		select { // gather a batch
		case <-ctx.Done():
			return
		case <-time.After(win):
		}
		r.mu.Lock()
		batch := r.dirty
		r.dirty = nil
		r.mu.Unlock()
		var retry []uint32
		var worst int
		for h, tries := range batch {
			if !r.one(ctx, h) {
				retry = append(retry, h)
				worst = max(worst, tries+1)
			}
		}
		if len(retry) > 0 {
			delay := min(time.Duration(1<<min(worst, 6))*100*time.Millisecond, 5*time.Second)
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(delay):
					r.mu.Lock()
					if r.dirty == nil {
						r.dirty = map[uint32]int{}
					}
					for _, h := range retry {
						r.dirty[h] = worst
					}
					r.mu.Unlock()
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			}()
		}
	}
}

// one updates Docker for h; false means retry later.
func (r *Reconciler) one(ctx context.Context, h uint32) bool {
	e := r.A.Get(h)
	if e == nil || !e.Docker {
		return true // gone: nothing to reconcile
	}
	e.mu.Lock()
	cur, ver := e.cur, e.version
	e.mu.Unlock()
	res := container.Resources{CpusetCpus: cur.CpusetCpus}
	if e.NoDockerCPUs.Load() {
		res.CpusetCpus = "" // docker update leaves it as it is
	}
	dockerCPU(&res, cur, e.DockerNanoCPUs.Load())
	if cur.MemoryBytes != cgroups.Max {
		res.Memory = cur.MemoryBytes
		res.MemorySwap = cur.MemswBytes // -1 when unlimited
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := r.Docker.ContainerUpdate(uctx, e.ID, container.UpdateConfig{Resources: res})
	cancel()
	if err != nil {
		r.Errors.Add(1)
		if r.A.Get(h) == nil {
			return true // container went away meanwhile
		}
		r.Log.Warn("docker update failed; will retry", "id", short(e.ID), "err", err)
		return false
	}
	r.Updates.Add(1)
	e.mu.Lock()
	if e.version != ver {
		// A newer fast-path write raced with runc: write the newest values
		// again and reconcile once more.
		c := e.cur
		e.cur.MemoryBytes, e.cur.MemswBytes, e.cur.CpusetCpus = cur.MemoryBytes, cur.MemswBytes, cur.CpusetCpus
		if err := e.write(c.CPUQuotaUs, c.CPUPeriodUs, c.MemoryBytes, c.CpusetCpus); err != nil {
			r.Log.Warn("re-applying limits after docker update failed", "id", short(e.ID), "err", err)
		}
		e.mu.Unlock()
		r.Mark(h)
		return true
	}
	e.mu.Unlock()
	return true
}

// dockerPeriodUs is the CFS period Docker writes with NanoCPUs.
const dockerPeriodUs = 100000

// dockerCPU puts the quota into Docker's terms. A container created with
// `--cpus` only takes NanoCPUs (Docker refuses CpuQuota/CpuPeriod beside
// it), which Docker applies with its own 100 ms period: the quota is
// rescaled to it, and left out (Docker's CPU view stays as it was) when
// escrad runs another period, so runc never writes a period escrad did not
// choose.
func dockerCPU(res *container.Resources, cur Current, nano bool) {
	if nano {
		switch {
		case cur.CPUPeriodUs != dockerPeriodUs:
		case cur.CPUQuotaUs > 0:
			res.NanoCPUs = cur.CPUQuotaUs * 1e9 / dockerPeriodUs
		default:
			// Docker has no "unlimited" NanoCPUs update; 0 leaves it unchanged.
		}
		return
	}
	if cur.CPUQuotaUs > 0 {
		res.CPUQuota = cur.CPUQuotaUs
	} else {
		res.CPUQuota = -1
	}
	res.CPUPeriod = int64(cur.CPUPeriodUs)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
