package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
)

// RestoreCmd is the subcommand that only re-enables the kernel OOM killer
// of every group escrad may have armed, then exits (systemd ExecStopPost=).
const RestoreCmd = "restore-oom"

// defaultOOMState is the state file of armed groups, one per host id so
// several escrad (one per engine) on one machine keep apart.
func defaultOOMState(hostID string) string {
	return filepath.Join("/run/escra", "escrad-"+hostID+".oom-armed")
}

// restoreSources is where the groups escrad may have armed are found.
type restoreSources struct {
	State      string // state file written before each arming
	Docker     bool
	DockerHost string
	Apps       []string // empty: every labelled container
	Cgroups    []containers.CgroupSpec
}

// restoreOOM clears every trap listed in the state file and of every
// labelled container and configured cgroup (v1: oom_kill_disable 0, the
// kernel OOM killer back; v2: memory.high max, the brake released): after
// escrad and its guard died together, a task at its limit waits (v1) or
// crawls (v2) until this runs. With settle > 0 it
// then waits up to settle for the groups that had a waiting task to leave
// the OOM state (the kernel OOM killer acts, or memory was freed), so a
// restarting escrad does not trap again a task that has already waited
// longer than any OOM deadline. It returns how many groups it could not
// restore.
func restoreOOM(log *slog.Logger, src restoreSources, settle time.Duration) int {
	t0 := time.Now()
	extra := configuredTrapFiles(log, src.Cgroups)
	if src.Docker {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ps, err := labelledTrapFiles(ctx, src.DockerHost, src.Apps)
		cancel()
		if err != nil {
			// The state file still covers what this escrad armed.
			log.Warn("oom restore: labelled containers not listed; state file only", "err", err)
		}
		extra = append(extra, ps...)
	}
	res, err := cgroupfs.RestoreRecorded(src.State, extra)
	if err != nil {
		log.Error("oom restore: state file unreadable; labelled containers only", "state", src.State, "err", err)
	}
	failed, armed, waiting := 0, 0, []string{}
	for _, r := range res {
		// v1 groups get their OOM killer back; v2 groups lose the brake.
		what := "OOM killer re-enabled"
		if filepath.Base(r.Path) == "memory.high" {
			what = "memory.high brake released"
		}
		if r.Err != nil {
			failed++
			log.Error("oom restore: not restored", "path", r.Path, "err", r.Err)
			continue
		}
		if r.UnderOOM {
			waiting = append(waiting, r.Path)
		}
		if !r.Armed { // already clear: every labelled container is listed
			log.Debug("oom restore: already clear", "path", r.Path)
			continue
		}
		armed++
		log.Info("oom restore: "+what, "path", r.Path, "task_waiting", r.UnderOOM)
	}
	left := 0
	if settle > 0 && len(waiting) > 0 {
		deadline := time.Now().Add(settle)
		for {
			left = 0
			for _, p := range waiting {
				if cgroupfs.UnderOOM(p) {
					left++
				}
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	log.Info("oom restore done", "state", src.State, "groups", len(res), "were_armed", armed, "tasks_were_waiting", len(waiting),
		"still_waiting", left, "failed", failed, "took", time.Since(t0).Round(time.Microsecond))
	return failed
}

// labelledTrapFiles lists the trap file (cgroupfs.TrapFile) of every running or
// paused container labelled escra.app (of apps, when given).
func labelledTrapFiles(ctx context.Context, host string, apps []string) ([]string, error) {
	cli, err := containers.NewDockerClient(host)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).
		Add("label", containers.AppLabel).Add("status", "running", "paused")})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list.Items {
		if len(apps) > 0 && !slices.Contains(apps, c.Labels[containers.AppLabel]) {
			continue
		}
		res, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		j := res.Container
		if err != nil || j.State == nil || j.State.Pid <= 0 {
			continue // gone meanwhile
		}
		p, err := cgroups.PathsForPID(j.State.Pid)
		if err != nil {
			continue
		}
		if f, ok := cgroupfs.TrapFile(p); ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// configuredTrapFiles are the config file's cgroups (--no-docker hosts).
func configuredTrapFiles(log *slog.Logger, specs []containers.CgroupSpec) []string {
	var out []string
	for _, c := range specs {
		p, err := cgroups.PathsForCgroup(c.Path)
		if err != nil {
			log.Debug("oom restore: configured cgroup not found", "path", c.Path, "err", err)
			continue
		}
		if f, ok := cgroupfs.TrapFile(p); ok {
			out = append(out, f)
		}
	}
	return out
}

// appList is --apps (when given) or the config file's apps.
func appList(flagGiven bool, flagVal string, file []string) []string {
	if !flagGiven && flagVal == "" {
		return file
	}
	var out []string
	for _, a := range strings.Split(flagVal, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// restoreUsage is the subcommand's one-line help.
var restoreUsage = fmt.Sprintf("escrad %s [the escrad flags]: re-enable the kernel OOM killer of every group escrad may have armed (state file, labelled containers), then exit", RestoreCmd)
