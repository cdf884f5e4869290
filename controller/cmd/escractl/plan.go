package main

import (
	"fmt"
	"strings"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// live is what the controller holds for the apps being applied.
type live struct {
	apps    map[string]adminclient.App
	running map[string]map[string]bool // app → container names
}

func fetchLive(e *env, c *adminclient.Client) (*live, error) {
	apps, err := c.Apps(e.ctx)
	if err != nil {
		return nil, err
	}
	cs, err := c.Containers(e.ctx, "")
	if err != nil {
		return nil, err
	}
	l := &live{apps: map[string]adminclient.App{}, running: map[string]map[string]bool{}}
	for _, a := range apps {
		l.apps[a.Name] = a
	}
	for _, ct := range cs {
		if l.running[ct.App] == nil {
			l.running[ct.App] = map[string]bool{}
		}
		l.running[ct.App][ct.Name] = true
	}
	return l, nil
}

// liveDoc is the app as the controller shows it: the spec it was applied
// with, or one made of its budget (an app defined without a spec, or auto).
func liveDoc(a adminclient.App) spec.Doc {
	if a.Spec != nil {
		return *a.Spec
	}
	return spec.Doc{Name: a.Name, CPU: spec.FormatCPU(a.CPUCores), Memory: spec.FormatBytesExact(a.MemoryBytes), Sigma: a.Sigma}
}

// wantDoc is what applying app makes the controller hold: a spec without
// containers (or --budget-only) keeps the containers it had.
func wantDoc(app *spec.App, cur *adminclient.App, budgetOnly bool) spec.Doc {
	d := app.Doc()
	if budgetOnly || len(app.Containers) == 0 {
		d.Containers = nil
		if cur != nil && cur.Spec != nil {
			d.Containers = cur.Spec.Containers
		}
	}
	return d
}

// target is what the controller holds for app (existed: whether it has
// it) and what applying app would make it hold.
func (l *live) target(app *spec.App, budgetOnly bool) (cur adminclient.App, existed bool, want spec.Doc) {
	cur, existed = l.apps[app.Name]
	var curp *adminclient.App
	if existed {
		curp = &cur
	}
	return cur, existed, wantDoc(app, curp, budgetOnly)
}

// planFrom is what a plan starts from: the app as the controller shows
// it, or for an app it does not have yet the budget alone, so that every
// container of want is listed as created.
func planFrom(cur adminclient.App, existed bool, want spec.Doc) spec.Doc {
	if existed {
		return liveDoc(cur)
	}
	return spec.Doc{Name: want.Name, CPU: want.CPU, Memory: want.Memory, Sigma: want.Sigma, Mode: want.Mode}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// modeName is a Doc's mode, which leaves the default out.
func modeName(m string) string {
	if m == "" {
		return spec.ModeEnforce
	}
	return m
}

// planLines says, per container template, what applying changes.
func planLines(cur, want spec.Doc) []string {
	var out []string
	old := map[string]spec.DocContainer{}
	for _, c := range cur.Containers {
		old[c.Name] = c
	}
	replicaNames := func(app, c string, from, to int) string {
		var n []string
		for r := from; r <= to; r++ {
			n = append(n, fmt.Sprintf("%s-%s-%d", app, c, r))
		}
		return strings.Join(n, ", ")
	}
	for _, c := range want.Containers {
		o, ok := old[c.Name]
		delete(old, c.Name)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("create %s: %d replicas of %s", c.Name, c.Replicas, c.Image))
			continue
		case !o.Template(c):
			what := "its template changed"
			if o.Image != c.Image {
				what = fmt.Sprintf("image %s → %s", o.Image, c.Image)
			}
			out = append(out, fmt.Sprintf("replace %s, one replica at a time (%s)", c.Name, what))
		}
		if o.MaxCPU != c.MaxCPU || o.MaxMemory != c.MaxMemory {
			out = append(out, fmt.Sprintf("max %s: cpu %s → %s, memory %s → %s (running replicas kept)", c.Name,
				orNone(o.MaxCPU), orNone(c.MaxCPU), orNone(o.MaxMemory), orNone(c.MaxMemory)))
		}
		switch {
		case c.Replicas > o.Replicas:
			out = append(out, fmt.Sprintf("scale %s %d → %d: create %s", c.Name, o.Replicas, c.Replicas, replicaNames(want.Name, c.Name, max(o.Replicas+1, 2), c.Replicas)))
		case c.Replicas < o.Replicas:
			out = append(out, fmt.Sprintf("scale %s %d → %d: remove %s", c.Name, o.Replicas, c.Replicas, replicaNames(want.Name, c.Name, c.Replicas+1, o.Replicas)))
		}
	}
	for _, c := range cur.Containers {
		if _, gone := old[c.Name]; gone {
			out = append(out, fmt.Sprintf("remove %s: %d replicas", c.Name, c.Replicas))
		}
	}
	if cur.Mode != want.Mode {
		out = append(out, fmt.Sprintf("mode %s → %s", modeName(cur.Mode), modeName(want.Mode)))
	}
	if cur.CPU != want.CPU || cur.Memory != want.Memory || cur.Sigma != want.Sigma {
		out = append(out, fmt.Sprintf("budget %s cores, %s, σ %g → %s cores, %s, σ %g", cur.CPU, cur.Memory, cur.Sigma, want.CPU, want.Memory, want.Sigma))
	}
	return out
}
