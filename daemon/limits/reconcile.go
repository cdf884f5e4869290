package limits

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// Updater is the part of the Docker client the reconciler uses.
type Updater interface {
	ContainerUpdate(ctx context.Context, id string, opts client.ContainerUpdateOptions) (client.ContainerUpdateResult, error)
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
	// Settled, when set, is called (never with a lock held) once a docker
	// update that held acknowledgements back (Applier.HoldAck) settled
	// and the newest limits are in the cgroup; gen is the newest held.
	Settled func(h uint32, gen uint64)

	mu    sync.Mutex
	dirty map[uint32]int // handle -> failed attempts so far
	kick  chan struct{}

	Updates atomic.Uint64
	Errors  atomic.Uint64
}

// DefaultReconcileWindow batches Docker's view for a minute. Each docker
// update runs dockerd, containerd and runc, milliseconds of CPU wherever
// the scheduler puts them, the app's CPUs included. The window grew with
// what each step cost (docs/daemon.md, "Docker's view"): at 250 ms and
// 1 s, runc runs starved escrad's telemetry and the bench's chain; at 5 s,
// redis-only A/Bs had Escra's p99 a median 32 µs above static15's, 12 µs
// with the reconciler off. docker inspect lags the cgroup by at most this
// much; the cgroup, escractl get and /metrics are current, and Run
// brings Docker up to date once more when escrad stops.
const DefaultReconcileWindow = time.Minute

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
			r.flush()
			return
		case <-kick:
		}
		select { // gather a batch
		case <-ctx.Done():
			r.flush()
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

// flushTimeout bounds the last reconcile when Run ends.
const flushTimeout = 10 * time.Second

// flush sends Docker the limits of every container still marked, once,
// when Run ends: with a window of a minute, an escrad that stops would
// otherwise leave docker inspect, and a restart of the container while no
// escrad runs, up to a minute behind the cgroup.
func (r *Reconciler) flush() {
	r.mu.Lock()
	batch := r.dirty
	r.dirty = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	sent := 0
	for h := range batch {
		if ctx.Err() != nil {
			r.Log.Warn("docker's view left behind the cgroup at stop", "containers", len(batch)-sent)
			return
		}
		r.one(ctx, h)
		sent++
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
	res := container.Resources{CpusetCpus: cur.CpusetCpus}
	if e.NoDockerCPUs.Load() {
		res.CpusetCpus = "" // docker update leaves it as it is
	}
	dockerCPU(&res, cur, e.DockerNanoCPUs.Load())
	var sent Current // what runc may write: the CPU and memory sent (0: none)
	if res.CPUQuota != 0 || res.NanoCPUs != 0 {
		sent.CPUQuotaUs, sent.CPUPeriodUs = cur.CPUQuotaUs, cur.CPUPeriodUs
	}
	if cur.MemoryBytes != cgroups.Max {
		res.Memory = cur.MemoryBytes
		res.MemorySwap = cur.MemswBytes // -1 when unlimited
		sent.MemoryBytes = cur.MemoryBytes
	}
	e.sendingDocker(sent)
	e.mu.Unlock()
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := r.Docker.ContainerUpdate(uctx, e.ID, client.ContainerUpdateOptions{Resources: &res})
	cancel()
	if err != nil {
		r.Errors.Add(1)
		if r.A.Get(h) == nil {
			return true // container went away meanwhile
		}
		r.Log.Warn("docker update failed; will retry", "id", short(e.ID), "err", err)
		if !mayLand(err) {
			// Docker answered: whatever runc wrote is behind us now; put
			// the newest limits back and release held acknowledgements.
			r.settle(h, e, cur, ver, true)
		}
		return false
	}
	r.Updates.Add(1)
	if r.settle(h, e, cur, ver, false) {
		r.Mark(h) // a newer fast-path write raced with runc: once more
	}
	return true
}

// settle ends what e's docker updates may still do. When e changed since
// version ver, or force is set (Docker answered with an error: what runc
// wrote is not known), the newest limits are written again, since runc may
// have written was over a newer fast-path write. Then acknowledgements
// held on Docker are released. It reports whether it rewrote (the caller
// reconciles once more). An update that timed out may in principle still
// land later; it counts as settled once a later one returned.
func (r *Reconciler) settle(h uint32, e *Entry, was Current, ver uint64, force bool) bool {
	e.mu.Lock()
	rewrite := force || e.version != ver
	if rewrite {
		// The cgroup may hold was: write from there, so memsw is
		// ordered against the right limit and the cpuset is rewritten.
		c := e.cur
		e.cur.MemoryBytes, e.cur.MemswBytes, e.cur.CpusetCpus = was.MemoryBytes, was.MemswBytes, was.CpusetCpus
		if err := e.write(c.CPUQuotaUs, c.CPUPeriodUs, c.MemoryBytes, c.CpusetCpus); err != nil {
			// The cgroup may hold what runc wrote: keep holding.
			e.mu.Unlock()
			r.Log.Warn("re-applying limits after docker update failed", "id", short(e.ID), "err", err)
			return true
		}
	}
	e.dockerOut = false
	held := e.heldGen
	e.heldGen = 0
	e.mu.Unlock()
	if held != 0 && r.Settled != nil {
		r.Settled(h, held)
	}
	return rewrite
}

// mayLand reports whether a failed docker update may still be applied:
// no answer came (timeout, broken connection), as opposed to an error
// status, after which Docker is done with it.
func mayLand(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || client.IsErrConnectionFailed(err) {
		return true
	}
	answered := cerrdefs.IsInvalidArgument(err) || cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) ||
		cerrdefs.IsInternal(err) || cerrdefs.IsUnavailable(err) || cerrdefs.IsPermissionDenied(err) ||
		cerrdefs.IsUnauthorized(err) || cerrdefs.IsNotImplemented(err) || cerrdefs.IsUnknown(err) ||
		cerrdefs.IsFailedPrecondition(err) || cerrdefs.IsAlreadyExists(err)
	return !answered
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
