package cgroupfs

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
)

func oomControlPath(g *cgroups.Group) string {
	return filepath.Join(g.Paths.Memory, "memory.oom_control")
}

func addV1(g *cgroups.Group) (int, error) {
	oc := g.FD(cgroups.OOMControl)
	if oc < 0 {
		return -1, errors.New("oom: memory.oom_control not available")
	}
	if err := g.Write(cgroups.OOMControl, []byte("1")); err != nil {
		return -1, fmt.Errorf("oom: disable oom killer: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("oom: eventfd: %w", err)
	}
	ctl := filepath.Join(g.Paths.Memory, "cgroup.event_control")
	cfd, err := unix.Open(ctl, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("oom: %w", err)
	}
	defer unix.Close(cfd)
	if _, err := unix.Write(cfd, fmt.Appendf(nil, "%d %d", efd, oc)); err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("oom: register eventfd: %w", err)
	}
	return efd, nil
}
