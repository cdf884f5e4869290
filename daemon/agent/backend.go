package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/daemon/source/kmod"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Backend choices.
const (
	BackendAuto     = "auto"
	BackendKernel   = "kernel"
	BackendBPF      = "bpf"
	BackendCgroupfs = "cgroupfs"
)

// KernelSourceFunc builds the escra.ko (generic netlink) Source
// (kmod.NewSource).
type KernelSourceFunc func(period time.Duration, log *slog.Logger) (source.Source, error)

// Backend names the telemetry source in use.
func (a *Agent) Backend() string {
	switch a.src.Backend() {
	case pb.Backend_BACKEND_KERNEL:
		return BackendKernel
	case pb.Backend_BACKEND_BPF:
		return BackendBPF
	}
	return BackendCgroupfs
}

// stockOOM: OOMs are trapped from user space (source/cgroupfs: v1 eventfd,
// v2 memory.high brake), as the cgroupfs and bpf backends do; escra.ko
// holds the charge in the kernel instead.
func (a *Agent) stockOOM() bool {
	b := a.src.Backend()
	return b == pb.Backend_BACKEND_CGROUPFS || b == pb.Backend_BACKEND_BPF
}

// chooseSource sets a.src to the backend cfg.Backend names (with auto:
// the first that works) and configures it from cfg.
func (a *Agent) chooseSource(cfg Config) error {
	// auto prefers kernel > bpf > cgroupfs.
	auto := false
	switch cfg.Backend {
	case BackendAuto, "":
		auto = true
	case BackendKernel, BackendBPF, BackendCgroupfs:
	default:
		return fmt.Errorf("unknown backend %q (want auto, kernel, bpf or cgroupfs)", cfg.Backend)
	}
	if auto || cfg.Backend == BackendKernel {
		if cfg.KernelSource != nil {
			src, err := cfg.KernelSource(cfg.Period, cfg.Log)
			if err == nil {
				a.src = src
				configureEvents(src, cfg, "kernel")
			} else if !auto {
				return fmt.Errorf("kernel backend: %w", err)
			} else if errors.Is(err, kmod.ErrNoFamily) {
				cfg.Log.Info("kernel backend unavailable", "err", err)
			} else {
				// escra.ko is there but escrad cannot use it (most often
				// a unit without CAP_SYS_ADMIN): say so, do not fall
				// back quietly.
				cfg.Log.Warn("escra.ko is loaded but the kernel backend failed; falling back (escrad needs CAP_NET_ADMIN and CAP_SYS_ADMIN for it)", "err", err)
			}
		} else if !auto {
			return errors.New("kernel backend: not built into this escrad (use --backend cgroupfs or auto)")
		}
	}
	if a.src == nil && (auto || cfg.Backend == BackendBPF) {
		if cfg.BPFSource != nil {
			src, err := cfg.BPFSource(cfg.Period, cfg.Log)
			if err == nil {
				a.src = src
				configureEvents(src, cfg, "bpf")
			} else if !auto {
				return err // already says "bpf backend: ..."
			} else {
				cfg.Log.Info("bpf backend unavailable; using cgroupfs", "err", err)
			}
		} else if !auto {
			return errors.New("bpf backend: not built into this escrad (use --backend cgroupfs or auto)")
		}
	}
	if a.src == nil {
		cs, err := cgroupfs.NewSource(cfg.Period, cfg.Log)
		if err != nil {
			return err
		}
		cs.Limits = a.cpuLimits
		cs.NoParentShortcut = cfg.NoParentShortcut
		cs.ThrottlePoll = cfg.ThrottlePoll
		switch {
		case cfg.ThrottleNear < 0:
			cs.ThrottleNear = 0
		case cfg.ThrottleNear > 0:
			cs.ThrottleNear = cfg.ThrottleNear
		}
		switch {
		case cfg.ThrottleHot < 0:
			cs.ThrottleHot = 0
		case cfg.ThrottleHot > 0:
			cs.ThrottleHot = cfg.ThrottleHot
		}
		switch {
		case cfg.ThrottleWarm < 0:
			cs.ThrottleWarm = 0
		case cfg.ThrottleWarm > 0:
			cs.ThrottleWarm = cfg.ThrottleWarm
		}
		a.src = cs
		a.sampler = cs
	}
	return nil
}

// configureEvents applies the throttle-event flags to a backend whose
// scheduler hook sends the events itself (kernel, bpf): --throttle-poll 0
// turns them off there too, and --throttle-near sets the near threshold.
func configureEvents(src source.Source, cfg Config, backend string) {
	if te, ok := src.(interface{ SetThrottleEvents(bool) }); ok {
		te.SetThrottleEvents(cfg.ThrottlePoll > 0)
	}
	if tn, ok := src.(interface{ SetThrottleNear(float64) error }); ok && cfg.ThrottleNear != 0 {
		if err := tn.SetThrottleNear(max(cfg.ThrottleNear, 0)); err != nil {
			cfg.Log.Warn("throttle-near not applied; throttle events only", "backend", backend, "err", err)
		}
	}
}
