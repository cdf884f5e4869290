package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

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

// budgetOnly is today's step: the containers are not created by escractl
// yet; the Watcher path (docker run --label escra.app=NAME) joins them.
type budgetOnly struct{}

func (budgetOnly) Deploy(_ context.Context, _ *adminclient.Client, app *spec.App) (string, error) {
	return fmt.Sprintf("containers are not created by escractl yet: start them with docker run --label escra.app=%s ...", app.Name), nil
}

// deployer is the step apply uses; tests may swap it.
var deployer deployStep = budgetOnly{}

// Budget converts a validated spec into the controller's app budget. The
// allocator parameters go along only when the spec has an allocator section;
// otherwise the controller's own (flags) apply.
func Budget(a *spec.App) adminclient.AppBudget {
	b := adminclient.AppBudget{Name: a.Name, CPUCores: a.CPU, MemoryBytes: a.MemoryBytes, Sigma: a.Sigma}
	if a.AllocatorSet {
		al := a.Allocator
		b.Params = &allocator.Params{
			Window: al.Window, Upsilon: al.Upsilon, Gamma: al.Gamma, Kappa: al.Kappa, Period: al.Period,
			CPUFloorUs:   int64(math.Round(al.CPUFloor * float64(al.Period.Microseconds()))),
			OOMStepBytes: al.OOMStepBytes, SafeMarginBytes: al.ReclaimMarginBytes,
		}
	}
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
	file, err := specFlag(e, "apply", args)
	if err != nil {
		return err
	}
	// Validate before touching the controller: a bad spec changes nothing.
	app, err := spec.Load(file)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.PutApp(e.ctx, Budget(app)); err != nil {
		return wrap("apply "+app.Name, err)
	}
	fmt.Fprintf(e.stdout, "app %s: budget %g cores, %s (σ %g) set on the controller\n", app.Name, app.CPU, spec.FormatBytes(app.MemoryBytes), app.Sigma)
	note, err := deployer.Deploy(e.ctx, c, app)
	if err != nil {
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
