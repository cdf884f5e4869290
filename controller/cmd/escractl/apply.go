package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/spec"
)

// deployStep runs after the controller holds the app's budget (seed 000
// §IV-A: limits first, then containers). The deployer that creates the
// containers through the hosts' daemons plugs in here.
type deployStep interface {
	Deploy(ctx context.Context, c *adminclient.Client, app *spec.App) (string, error)
}

// hostDeployer is the Application Deployer's client side: it expands the
// replicas with their bootstrap limits (seed 000 §IV-A eq. 2) and asks the
// controller to place and create them on its hosts. The controller does it
// all or nothing.
type hostDeployer struct{}

func (hostDeployer) Deploy(ctx context.Context, c *adminclient.Client, app *spec.App) (string, error) {
	cs := Containers(app)
	placed, err := c.Deploy(ctx, app.Name, cs)
	if err != nil {
		return "", err
	}
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
				Network: c.Network, Host: c.Host, CPUCores: cpu, MemoryBytes: mem})
		}
	}
	return out
}

// deployer is the step apply uses; tests may swap it.
var deployer deployStep = hostDeployer{}

// Budget converts a validated spec into the controller's app budget. The
// allocator parameters go along only when the spec has an allocator section;
// otherwise the controller's own (flags) apply.
func Budget(a *spec.App) adminclient.AppBudget {
	b := adminclient.AppBudget{Name: a.Name, CPUCores: a.CPU, MemoryBytes: a.MemoryBytes, Sigma: a.Sigma}
	if a.AllocatorSet {
		al := a.Allocator
		// From the defaults: parameters the spec has no field for (the
		// minimum step) keep theirs rather than becoming 0.
		p := allocator.DefaultParams()
		p.Window, p.Upsilon, p.Gamma, p.Kappa, p.Period = al.Window, al.Upsilon, al.Gamma, al.Kappa, al.Period
		p.CPUFloorUs = int64(math.Round(al.CPUFloor * float64(al.Period.Microseconds())))
		p.OOMStepBytes, p.SafeMarginBytes = al.OOMStepBytes, al.ReclaimMarginBytes
		p.Headroom = al.Headroom
		b.Params = &p
		b.Policy = al.Policy
	}
	b.SLO = a.SLO
	return b
}

func specFlag(e *env, name string, args []string) (string, error) {
	fs := e.flags(name)
	file := fs.String("f", "", "")
	fs.StringVar(file, "filename", "", "")
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if *file == "" && len(pos) == 1 {
		*file = pos[0]
		pos = nil
	}
	if *file == "" {
		return "", usageErr("%s: give the spec with -f FILE", name)
	}
	if len(pos) > 0 {
		return "", usageErr("%s: unexpected argument %q", name, pos[0])
	}
	return *file, nil
}

func cmdValidate(e *env, args []string) error {
	file, err := specFlag(e, "validate", args)
	if err != nil {
		return err
	}
	app, err := spec.Load(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: app %s is valid: %d containers, %g cores, %s\n", file, app.Name, app.Replicas(), app.CPU, spec.FormatBytes(app.MemoryBytes))
	// The bootstrap limits each replica would start with (seed 000 §IV-A eq. 2).
	t := newTable([]int{2, 3, 4}, "CONTAINER", "IMAGE", "REPLICAS", "START CPU", "START MEM", "HOST")
	for i := range app.Containers {
		c := &app.Containers[i]
		cpu, mem := app.Bootstrap(c)
		host := c.Host
		if host == "" {
			host = "any"
		}
		t.add(c.Name, c.Image, strconv.Itoa(c.Replicas), cores(cpu), spec.FormatBytes(mem), host)
	}
	t.write(e.stdout, e.width)
	return nil
}

func cmdApply(e *env, args []string) error {
	fs := e.flags("apply")
	file := fs.String("f", "", "")
	fs.StringVar(file, "filename", "", "")
	budgetOnly := fs.Bool("budget-only", false, "")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *file == "" && len(pos) == 1 {
		*file, pos = pos[0], nil
	}
	if *file == "" {
		return usageErr("apply: give the spec with -f FILE")
	}
	if len(pos) > 0 {
		return usageErr("apply: unexpected argument %q", pos[0])
	}
	// Validate before touching the controller: a bad spec changes nothing.
	app, err := spec.Load(*file)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	apps, err := c.Apps(e.ctx)
	if err != nil {
		return wrap("apply "+app.Name, err)
	}
	existed := false
	for _, a := range apps {
		existed = existed || a.Name == app.Name
	}
	running := 0
	if existed {
		cs, err := c.Containers(e.ctx, app.Name)
		if err != nil {
			return wrap("apply "+app.Name, err)
		}
		running = len(cs)
	}
	if err := c.PutApp(e.ctx, Budget(app)); err != nil {
		return wrap("apply "+app.Name, err)
	}
	fmt.Fprintf(e.stdout, "app %s: budget %g cores, %s (σ %g) set on the controller\n", app.Name, app.CPU, spec.FormatBytes(app.MemoryBytes), app.Sigma)
	switch {
	case *budgetOnly:
		fmt.Fprintf(e.stdout, "app %s: budget only: start containers with docker run --label escra.app=%s ...\n", app.Name, app.Name)
		return nil
	case running > 0:
		fmt.Fprintf(e.stdout, "app %s: already runs %d containers, left as they are (escractl delete %s, then apply, to redeploy)\n", app.Name, running, app.Name)
		return nil
	}
	note, err := deployer.Deploy(e.ctx, c, app)
	if err != nil {
		// The controller removed the containers; an app this apply
		// created goes too, so nothing is left half-deployed.
		if !existed {
			_ = c.DeleteApp(context.WithoutCancel(e.ctx), app.Name)
		}
		return wrap("apply "+app.Name, err)
	}
	if note != "" {
		fmt.Fprintf(e.stdout, "app %s: %s\n", app.Name, note)
	}
	return nil
}

func cmdDelete(e *env, args []string) error {
	fs := e.flags("delete")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("delete: give exactly one app name")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.DeleteApp(e.ctx, pos[0]); err != nil {
		if errors.Is(err, adminclient.ErrNotFound) {
			return fmt.Errorf("unknown app %q", pos[0])
		}
		return wrap("delete "+pos[0], err)
	}
	fmt.Fprintf(e.stdout, "app %s deleted\n", pos[0])
	return nil
}

// wrap prefixes what was being done, except for an unreachable controller,
// whose message already says everything.
func wrap(what string, err error) error {
	var ue *adminclient.UnreachableError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
