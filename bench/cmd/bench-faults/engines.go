package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/escra-dev/escra/internal/dockertest"
)

// Real Docker engines, one per host: scripts/hosts.sh starts them (each
// its own data root, exec root, socket, containerd and cgroup parent,
// no bridge) under the bench's own name, so an operator's hosts.sh set
// and the machine's main engine are never touched. The workload image
// (memhog, spin) is built here and imported into each engine: nothing is
// pulled. Containers carry escra.app=APP and are found by the escrads as
// any labelled container is.

const (
	hostsName = "escra-faults"  // /run/escra-faults, /var/lib/escra-faults
	hostsTag  = "escra-faults-" // cgroup parent /escra-faults-hN
)

type engine struct {
	n     int
	host  string // unix:///run/escra-faults/hN/docker.sock
	cli   *dockerclient.Client
	image string
}

var (
	engines   []*engine
	enginesUp bool
)

func hostsSh(args ...string) error {
	cmd := exec.Command("scripts/hosts.sh", args...)
	cmd.Env = append(os.Environ(), "ESCRA_HOSTS_NAME="+hostsName, "ESCRA_HOSTS_TAG="+hostsTag, "ESCRA_HOSTS_METRICS_BASE=0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("hosts.sh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

// startEngines starts k engines (hosts.sh up: what a killed run left is
// cleaned or reused) and puts the workload image in each.
func startEngines(k int) error {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return errors.New("dockerd not installed (scripts/setup.sh installs docker.io)")
	}
	enginesUp = true
	t0 := time.Now()
	if err := hostsSh("up", fmt.Sprint(k), "--no-escrad", "--insecure"); err != nil {
		return err
	}
	ctx := context.Background()
	for n := 1; n <= k; n++ {
		e := &engine{n: n, host: fmt.Sprintf("unix:///run/%s/h%d/docker.sock", hostsName, n)}
		var err error
		if e.cli, err = dockerclient.New(dockerclient.WithHost(e.host)); err != nil {
			return err
		}
		dockertest.RemoveAllTest(e.cli) // a killed run's
		if e.image, err = dockertest.ImportWorkloads(ctx, e.cli); err != nil {
			return fmt.Errorf("h%d: %w", n, err)
		}
		engines = append(engines, e)
	}
	say("engines: %d real dockerd (scripts/hosts.sh as %s, cgroup parents /%sh1..h%d), workload image %s imported, in %.1f s",
		k, hostsName, hostsTag, k, engines[0].image, time.Since(t0).Seconds())
	return nil
}

// stopEngines removes the engines with everything of theirs, after
// copying their dockerd logs into logs ("": not kept).
func stopEngines(logs string) {
	if !enginesUp {
		return
	}
	if logs != "" {
		for _, e := range engines {
			name := fmt.Sprintf("dockerd-h%d.log", e.n)
			if b, err := os.ReadFile(filepath.Join("/run", hostsName, "logs", name)); err == nil {
				os.WriteFile(filepath.Join(logs, name), b, 0o644)
			}
		}
	}
	for _, e := range engines {
		e.cli.Close()
	}
	engines = nil
	if err := hostsSh("down"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
	}
	enginesUp = false
}

// ctr is one labelled container and its cgroup (relative to each v1
// hierarchy's root: Docker's cgroupfs driver uses one path in all).
type ctr struct {
	eng      *engine
	id, name string
	rel      string
}

var (
	ctrsMu sync.Mutex
	ctrs   []*ctr // every container made, removed at cleanup
)

// runContainer starts an idle container of app on e with the limits
// escrad will find (docker inspect) and put back when no controller
// answers.
func runContainer(e *engine, name, app string, memBytes int64, quotaUs int64) (*ctr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name = fmt.Sprintf("flt-%s-%d", name, os.Getpid())
	id, err := dockertest.Start(ctx, e.cli, dockertest.Spec{
		Name: name, Image: e.image, Cmd: []string{"-idle"},
		Labels:    map[string]string{"escra.app": app},
		Resources: container.Resources{Memory: memBytes, MemorySwap: memBytes, CPUQuota: quotaUs, CPUPeriod: 100000},
	})
	c := &ctr{eng: e, id: id, name: name}
	if id != "" {
		ctrsMu.Lock()
		ctrs = append(ctrs, c)
		ctrsMu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	j, err := dockertest.Inspect(ctx, e.cli, id)
	if err != nil {
		return nil, err
	}
	if c.rel, err = memCgroupOf(j.State.Pid); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// memCgroupOf is pid's memory cgroup (v1) from /proc/PID/cgroup.
func memCgroupOf(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			return parts[2], nil
		}
	}
	return "", errors.New("no memory cgroup (the bench needs cgroup v1)")
}

// removeContainers removes every container the bench made (their hogs
// with them).
func removeContainers() {
	ctrsMu.Lock()
	defer ctrsMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctrs {
		wg.Add(1)
		go func() { defer wg.Done(); dockertest.Remove(c.eng.cli, c.id) }()
	}
	wg.Wait()
	ctrs = nil
}

// execHog runs one memhog in c (docker exec: the container's namespaces
// and cgroup) and waits for it; killed says the kernel's OOM killer ended
// it (SIGKILL: exit 137).
func execHog(ctx context.Context, c *ctr, mib int, hold time.Duration) (killed bool, err error) {
	ex, err := c.eng.cli.ExecCreate(ctx, c.id, dockerclient.ExecCreateOptions{
		Cmd:          []string{"/bin/memhog", "-mib", fmt.Sprint(mib), "-step-mib", "8", "-hold", hold.String()},
		AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return false, err
	}
	att, err := c.eng.cli.ExecAttach(ctx, ex.ID, dockerclient.ExecAttachOptions{})
	if err != nil {
		return false, err
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, att.Reader); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	att.Close()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ins, err := c.eng.cli.ExecInspect(ictx, ex.ID, dockerclient.ExecInspectOptions{})
		if err != nil {
			return false, err
		}
		if !ins.Running {
			return ins.ExitCode == 137, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hogLoop keeps one memhog at a time in c until ctx ends: each allocates
// mib MiB (past the limit the controller's reclaim left while c idled, so
// it meets OOMs), holds it briefly and exits; a released one is
// OOM-killed. Counts how many ran and how many the kernel killed.
func hogLoop(ctx context.Context, c *ctr, mib int, runs, kills *int, mu *sync.Mutex) {
	for ctx.Err() == nil {
		killed, err := execHog(ctx, c, mib, 300*time.Millisecond)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
			}
			continue
		}
		mu.Lock()
		*runs++
		if killed {
			*kills++
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(1500 * time.Millisecond): // a reclaim (every 1 s) while idle
		}
	}
}

// sockPath is a unix:// host's file.
func sockPath(host string) string { return filepath.Clean(strings.TrimPrefix(host, "unix://")) }
