package agent

import (
	"fmt"
	"math"
)

// OnlinePath is where glibc's sysconf(_SC_NPROCESSORS_ONLN) and nginx's
// worker_processes auto count CPUs; a view is bind-mounted over it.
const OnlinePath = "/sys/devices/system/cpu/online"

// ViewMount is the docker run --mount value that puts the view file at
// path over OnlinePath. --mount, unlike -v, refuses a missing source
// instead of creating a directory there that runc cannot mount on a file.
func ViewMount(path string) string {
	return "type=bind,source=" + path + ",target=" + OnlinePath + ",readonly"
}

// PrepareHandView prepares the view of a container a user starts by hand
// (escrad view prepare NAME --cpus R): the file lists ⌈cpus⌉ CPUs (0:
// every online CPU) until escrad places the container and rewrites it
// with its cpuset. It returns the view's path.
func PrepareHandView(dir, name string, cpus float64) (string, error) {
	if math.IsNaN(cpus) || cpus < 0 || cpus > 4096 {
		return "", fmt.Errorf("--cpus %v: want a number of CPUs ≥ 0, as docker run --cpus", cpus)
	}
	return PrepareView(dir, name, int(math.Ceil(cpus-1e-9)))
}
