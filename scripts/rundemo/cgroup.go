package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// eachContainer calls fn for every container of app on the engines, with
// its main process's PID (0 when it is not running) and Docker's OOMKilled
// flag.
func eachContainer(ctx context.Context, app string, engines []string, fn func(id string, pid int, oomKilled bool)) error {
	for _, e := range engines {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		cli, err := client.New(client.WithHost(e))
		if err != nil {
			return err
		}
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", "escra.app="+app)})
		if err != nil {
			cli.Close()
			return fmt.Errorf("engine %s: %w", e, err)
		}
		for _, c := range list.Items {
			j, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
			if err != nil {
				continue
			}
			fn(c.ID, j.Container.State.Pid, j.Container.State.OOMKilled)
		}
		cli.Close()
	}
	return nil
}

// oomKills counts the kernel OOM kills in the app's containers on every
// engine: the memory cgroup's oom_kill counter, or Docker's OOMKilled flag
// where the counter cannot be read.
func oomKills(ctx context.Context, app string, engines []string) (int, error) {
	n := 0
	err := eachContainer(ctx, app, engines, func(_ string, pid int, oomKilled bool) {
		if k, ok := cgroupStat(pid, "memory", "memory.oom_control", "memory.events", "oom_kill"); ok {
			n += int(k)
		} else if oomKilled {
			n++
		}
	})
	return n, err
}

// throttledByContainer reads each running container's nr_throttled from
// its CPU cgroup's cpu.stat, keyed by container id.
func throttledByContainer(ctx context.Context, app string, engines []string) (map[string]uint64, error) {
	m := map[string]uint64{}
	err := eachContainer(ctx, app, engines, func(id string, pid int, _ bool) {
		if k, ok := cgroupStat(pid, "cpu", "cpu.stat", "cpu.stat", "nr_throttled"); ok {
			m[id] = k
		}
	})
	return m, err
}

// cgroupStat reads the counter key from the cgroup of pid that holds the
// controller: file v1 under a v1 hierarchy (its directory named for the
// controllers it holds, e.g. cpu,cpuacct), file v2 under the unified one.
func cgroupStat(pid int, controller, v1, v2, key string) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, false
	}
	var path string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			path = filepath.Join("/sys/fs/cgroup", f[2], v2)
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == controller {
				return readKey(filepath.Join("/sys/fs/cgroup", f[1], f[2], v1), key)
			}
		}
	}
	if path == "" {
		return 0, false
	}
	return readKey(path, key)
}

// readKey reads "key value" from a flat-keyed cgroup file.
func readKey(path, key string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, kv := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(kv, key+" "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
