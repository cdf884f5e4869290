package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// deploy is the Application Deployer's client side (Escra §IV-A): it
// expands the replicas with their bootstrap limits (eq. 2) and asks the
// controller to place and create them on its hosts, all or nothing for a
// new app, or to roll a running app out to them one replica at a time.
func deploy(ctx context.Context, c *adminclient.Client, app *spec.App) (string, error) {
	cs := Containers(app)
	resp, err := c.DeployOrRollout(ctx, app.Name, cs)
	if err != nil {
		return "", err
	}
	if r := resp.Rollout; r != nil {
		return fmt.Sprintf("rolled out one at a time: %s", rolloutSummary(r)), nil
	}
	placed := resp.Containers
	per := map[string]int{}
	var hosts []string
	for _, p := range placed {
		if per[p.HostID] == 0 {
			hosts = append(hosts, p.HostID)
		}
		per[p.HostID]++
	}
	sort.Strings(hosts)
	var b strings.Builder
	for i, h := range hosts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", h, per[h])
	}
	return fmt.Sprintf("%d containers created and registered (%s)", len(placed), b.String()), nil
}

// Containers expands a spec into the containers to create: replica i of
// container c of app a is named a-c-i (a-c when there is one replica).
func Containers(a *spec.App) []adminclient.DeployContainer {
	var out []adminclient.DeployContainer
	for i := range a.Containers {
		c := &a.Containers[i]
		cpu, mem := a.Bootstrap(c)
		keys := make([]string, 0, len(c.Env))
		for k := range c.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for r := 1; r <= c.Replicas; r++ {
			name := a.Name + "-" + c.Name
			if c.Replicas > 1 {
				name += "-" + strconv.Itoa(r)
			}
			env := []string{"ESCRA_APP=" + a.Name, "ESCRA_REPLICA=" + strconv.Itoa(r)}
			for _, k := range keys {
				env = append(env, k+"="+c.Env[k])
			}
			out = append(out, adminclient.DeployContainer{Name: name, Image: c.Image, Command: c.Command, Env: env,
				Network: c.Network, Host: c.Host, CPUCores: cpu, MemoryBytes: mem, CPUClass: c.CPUClass})
		}
	}
	return out
}

func rolloutSummary(r *adminapi.Rollout) string {
	part := func(what string, names []string) string {
		if len(names) == 0 {
			return fmt.Sprintf("0 %s", what)
		}
		return fmt.Sprintf("%d %s (%s)", len(names), what, strings.Join(names, ", "))
	}
	return strings.Join([]string{part("created", r.Created), part("replaced", r.Replaced), part("removed", r.Removed),
		fmt.Sprintf("%d unchanged", len(r.Unchanged))}, ", ")
}

// Budget converts a validated spec into the controller's app budget.
func Budget(a *spec.App) adminclient.AppBudget { return adminapi.FromSpec(a) }
