// Package containers finds the containers escrad manages: running Docker
// containers labelled escra.app=APP (Escra §IV-A "Container Watcher"),
// and plain cgroups named in the configuration (hosts or VMs without Docker).
package containers

import (
	"context"
	"errors"
	"fmt"

	"github.com/escra-dev/escra/internal/names"
)

// AppLabel is the Docker label that makes a container part of the
// Distributed Container named by its value. Nothing without it is touched.
const AppLabel = "escra.app"

// CPULabel picks a container's CPU placement (WYSIWYG §IV-B):
// "wysiwyg" (C1: an exclusive cpuset of ⌈quota⌉ cores), "shared" (C2, the
// default: the shared pool) or "auto" (the verdict `escractl profile
// --record` stored for the container's image decides; shared when none).
const CPULabel = "escra.cpu"

// CPU label values.
const (
	CPUWysiwyg = "wysiwyg"
	CPUShared  = "shared"
	CPUAuto    = "auto"
)

// ValidateCPU checks an escra.cpu value ("" is the default, shared).
func ValidateCPU(v string) error {
	switch v {
	case "", CPUWysiwyg, CPUShared, CPUAuto:
		return nil
	}
	return fmt.Errorf("escra.cpu label %q: want wysiwyg, shared or auto", v)
}

// MaxAppLen bounds an app name (a DNS label's length).
const MaxAppLen = names.MaxApp

// ValidateApp checks an escra.app value against the one rule for app
// names (internal/names): the spec, the controller and escrad agree.
func ValidateApp(app string) error {
	if app == "" {
		return errors.New("empty escra.app label")
	}
	if err := names.ValidateApp(app); err != nil {
		return fmt.Errorf("escra.app label: %w", err)
	}
	return nil
}

// Limits are the limits a container was started with (Docker's view).
// Zero means unset; CPUQuotaUs -1 means unlimited.
type Limits struct {
	CPUQuotaUs  int64
	CPUPeriodUs uint32
	MemoryBytes int64
	MemswBytes  int64 // Docker's MemorySwap (memory + swap); -1 unlimited
	CpusetCpus  string
	NanoCPUs    int64 // docker run --cpus, in 1e-9 cores (0: not set)
}

// Container is one managed workload: a Docker container or a plain cgroup.
type Container struct {
	ID   string // Docker id, or "cgroup:"+path for configured cgroups
	Name string
	App  string
	CPU  string // escra.cpu label value ("" when absent)
	// Image is the Docker image ID ("sha256:..."), "" for cgroups: the key
	// of escractl profile's verdict for escra.cpu=auto.
	Image string
	// Pid is the init process (0 for configured cgroups); CgroupPath is
	// set instead for configured cgroups (relative to the hierarchy root).
	Pid        int
	CgroupPath string
	Limits     Limits
	// Docker is true when Docker's view must be reconciled after a change.
	Docker bool
}

// Kind is what happened to a container.
type Kind int

const (
	// Started: a managed container is running (or was found running).
	Started Kind = iota + 1
	// Stopped: the container died or was removed.
	Stopped
	// Synced: the source (re)listed everything; IDs not in Live are gone.
	Synced
)

// Event is one change reported by a Source.
type Event struct {
	Kind      Kind
	Container Container       // Started
	ID        string          // Stopped
	Live      map[string]bool // Synced
}

// Source reports containers until ctx ends. It sends Started for every
// running managed container it finds, then changes as they happen.
type Source interface {
	Run(ctx context.Context, out chan<- Event) error
}
