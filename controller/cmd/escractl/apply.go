package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// deploy is the Application Deployer's client side (seed 000 §IV-A): it
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

// readSpecs reads every app in the -f files ("-" is stdin), in order;
// every problem in every file is reported.
func readSpecs(e *env, files []string) ([]*spec.App, error) {
	var apps []*spec.App
	var all spec.Errors
	seen := map[string]string{}
	for _, f := range files {
		var data []byte
		var err error
		name := filepath.Base(f)
		if f == "-" {
			name = "stdin"
			data, err = io.ReadAll(io.LimitReader(e.stdin, 4<<20))
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			if pe, ok := err.(*os.PathError); ok {
				err = pe.Err
			}
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		as, err := spec.ParseAll(name, data)
		var se spec.Errors
		if errors.As(err, &se) {
			all = append(all, se...)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if prev, dup := seen[a.Name]; dup {
				all = append(all, &spec.Error{File: name, Line: a.Line, Field: "name", Msg: fmt.Sprintf("app %q is also in %s", a.Name, prev)})
				continue
			}
			seen[a.Name] = name
			apps = append(apps, a)
		}
	}
	if len(all) > 0 {
		return nil, all
	}
	return apps, nil
}

// fileArgs takes the spec files from -f, or from one positional argument
// (escractl apply app.yaml, as before).
func fileArgs(cmd *cobra.Command, files, args []string) ([]string, error) {
	if len(files) == 0 && len(args) == 1 {
		return args, nil
	}
	if len(args) > 0 {
		return nil, usageErr("%s: unexpected argument %q", cmd.Name(), args[0])
	}
	if len(files) == 0 {
		return nil, usageErr("%s: give the spec with -f FILE (- for stdin)", cmd.Name())
	}
	return files, nil
}

func validateCmd(e *env) *cobra.Command {
	var files []string
	c := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check specs without contacting the controller",
		Long: `validate checks specs (docs/spec.md) and prints the bootstrap limits each
replica would start with (seed 000 §IV-A eq. 2). Every problem is listed.`,
		Example: `  escractl validate -f shop.yaml
  cat shop.yaml | escractl validate -f -`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, err := fileArgs(cmd, files, args)
			if err != nil {
				return err
			}
			apps, err := readSpecs(e, fs)
			if err != nil {
				return err
			}
			for i, app := range apps {
				if i > 0 {
					fmt.Fprintln(e.stdout)
				}
				printPlan(e, strings.Join(fs, ","), app)
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file (repeatable; - for stdin)")
	return c
}

func printPlan(e *env, file string, app *spec.App) {
	fmt.Fprintf(e.stdout, "%s: app %s is valid: %d containers, %g cores, %s\n", file, app.Name, app.Replicas(), app.CPU, spec.FormatBytes(app.MemoryBytes))
	if len(app.Containers) == 0 {
		return
	}
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
}

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
	if cur.CPU != want.CPU || cur.Memory != want.Memory || cur.Sigma != want.Sigma {
		out = append(out, fmt.Sprintf("budget %s cores, %s, σ %g → %s cores, %s, σ %g", cur.CPU, cur.Memory, cur.Sigma, want.CPU, want.Memory, want.Sigma))
	}
	return out
}

func applyCmd(e *env) *cobra.Command {
	var files []string
	var budgetOnly, dryRun bool
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Apply specs: set each app's budget and bring its containers to the spec",
		Long: `apply is declarative: a new app gets its budget, then its containers (all or
nothing); for a running app only what changed is done, one replica at a
time (scale down, then replace containers whose image, command, env,
network or host changed, then scale up), the others never stopped, the
budget kept. A spec equal to what runs is left alone ("unchanged").

A spec without containers, or --budget-only, sets the budget only: its
containers join with docker run --label escra.app=APP.`,
		Example: `  escractl apply -f shop.yaml
  escractl apply -f shop.yaml --dry-run
  escractl get apps shop -o yaml | sed 's/replicas: 3/replicas: 4/' | escractl apply -f -
  escractl apply --budget-only -f budgets.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, err := fileArgs(cmd, files, args)
			if err != nil {
				return err
			}
			// Validate everything before touching the controller: a bad
			// spec changes nothing.
			apps, err := readSpecs(e, fs)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			l, err := fetchLive(e, c)
			if err != nil {
				return wrap("apply "+apps[0].Name, err)
			}
			for _, app := range apps {
				if err := applyOne(e, c, l, app, budgetOnly, dryRun); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file (repeatable; - for stdin)")
	c.Flags().BoolVar(&budgetOnly, "budget-only", false, "set the budget only; leave containers as they are")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change; change nothing")
	return c
}

func applyOne(e *env, c *adminclient.Client, l *live, app *spec.App, budgetOnly, dryRun bool) error {
	cur, existed := l.apps[app.Name]
	var curp *adminclient.App
	if existed {
		curp = &cur
	}
	want := wantDoc(app, curp, budgetOnly)
	containersToo := !budgetOnly && len(app.Containers) > 0
	allRun := true
	for _, ct := range Containers(app) {
		allRun = allRun && l.running[app.Name][ct.Name]
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	if existed && !cur.Auto && liveDoc(cur).Equal(want) && (!containersToo || allRun) {
		fmt.Fprintf(e.stdout, "app %s unchanged%s\n", app.Name, suffix)
		return nil
	}
	if dryRun {
		what := "created"
		var lines []string
		if existed {
			what = "configured"
			lines = planLines(liveDoc(cur), want)
		} else {
			lines = planLines(spec.Doc{Name: app.Name, CPU: want.CPU, Memory: want.Memory, Sigma: want.Sigma}, want)
		}
		if !containersToo {
			lines = slices.DeleteFunc(lines, func(s string) bool { return !strings.HasPrefix(s, "budget") })
		}
		fmt.Fprintf(e.stdout, "app %s %s%s\n", app.Name, what, suffix)
		for _, ln := range lines {
			fmt.Fprintf(e.stdout, "  %s\n", ln)
		}
		return nil
	}
	b := Budget(app)
	b.Spec = &want
	if err := c.PutApp(e.ctx, b); err != nil {
		return wrap("apply "+app.Name, err)
	}
	fmt.Fprintf(e.stdout, "app %s: budget %g cores, %s (σ %g) set on the controller\n", app.Name, app.CPU, spec.FormatBytes(app.MemoryBytes), app.Sigma)
	if !containersToo {
		fmt.Fprintf(e.stdout, "app %s: budget only: start containers with docker run --label escra.app=%s ...\n", app.Name, app.Name)
		return nil
	}
	note, err := deploy(e.ctx, c, app)
	if err != nil {
		// A failed fresh deploy removed its containers; an app this apply
		// created goes too, so nothing is left half-deployed. A failed
		// rollout keeps what it did: apply again continues it.
		if !existed {
			_ = c.DeleteApp(context.WithoutCancel(e.ctx), app.Name)
		} else {
			// The budget took effect; the containers did not all follow.
			// The controller shows the templates it had, so get -o yaml
			// says what runs and applying the spec again retries.
			d := want
			d.Containers = liveDoc(cur).Containers
			b.Spec = &d
			_ = c.PutApp(context.WithoutCancel(e.ctx), b)
		}
		return wrap("apply "+app.Name, err)
	}
	if note != "" {
		fmt.Fprintf(e.stdout, "app %s: %s\n", app.Name, note)
	}
	return nil
}

func diffCmd(e *env) *cobra.Command {
	var files []string
	var budgetOnly bool
	c := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show how specs differ from what the controller runs",
		Long: `diff prints, per app, a unified diff of the spec the controller holds
against the one apply -f would make it hold, then what apply would do.
It exits 0 when nothing differs and 1 when something does (like diff(1)
and kubectl diff).`,
		Example: `  escractl diff -f shop.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, err := fileArgs(cmd, files, args)
			if err != nil {
				return err
			}
			apps, err := readSpecs(e, fs)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			l, err := fetchLive(e, c)
			if err != nil {
				return err
			}
			differ := false
			for _, app := range apps {
				cur, existed := l.apps[app.Name]
				var curp *adminclient.App
				var from []byte
				var curDoc spec.Doc
				if existed {
					curp = &cur
					curDoc = liveDoc(cur)
					from, _ = yaml.Marshal(curDoc)
				}
				want := wantDoc(app, curp, budgetOnly)
				to, _ := yaml.Marshal(want)
				if existed && bytes.Equal(from, to) {
					continue
				}
				differ = true
				fmt.Fprintf(e.stdout, "--- live/%s\n+++ %s/%s\n", app.Name, strings.Join(fs, ","), app.Name)
				for _, ln := range lineDiff(splitLines(string(from)), splitLines(string(to))) {
					fmt.Fprintln(e.stdout, ln)
				}
				if !existed {
					curDoc = spec.Doc{Name: app.Name, CPU: want.CPU, Memory: want.Memory, Sigma: want.Sigma}
				}
				for _, ln := range planLines(curDoc, want) {
					fmt.Fprintf(e.stdout, "# apply would %s\n", ln)
				}
			}
			if differ {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file (repeatable; - for stdin)")
	c.Flags().BoolVar(&budgetOnly, "budget-only", false, "compare as apply --budget-only would apply")
	return c
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lineDiff marks lines only in a with "-", only in b with "+", common
// ones with " " (a longest common subsequence; specs are short).
func lineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, " "+a[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "-"+a[i]) // removals first, as diff -u
			i++
		default:
			out = append(out, "+"+b[j])
			j++
		}
	}
	return out
}

func deleteCmd(e *env) *cobra.Command {
	var files []string
	var dryRun bool
	c := &cobra.Command{
		Use:   "delete APP... | -f FILE",
		Short: "Remove apps: their containers on every host, then their budgets",
		Example: `  escractl delete shop
  escractl delete -f shop.yaml
  escractl delete --dry-run shop batch`,
		ValidArgsFunction: completeApps(e),
		RunE: func(cmd *cobra.Command, args []string) error {
			names := args
			if len(files) > 0 {
				if len(args) > 0 {
					return usageErr("delete: give app names or -f FILE, not both")
				}
				apps, err := readSpecs(e, files)
				if err != nil {
					return err
				}
				names = nil
				for _, a := range apps {
					names = append(names, a.Name)
				}
			}
			if len(names) == 0 {
				return usageErr("delete: give an app name or -f FILE")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, n := range names {
				if dryRun {
					apps, err := c.Apps(e.ctx)
					if err != nil {
						return err
					}
					if !slices.ContainsFunc(apps, func(a adminclient.App) bool { return a.Name == n }) {
						return fmt.Errorf("unknown app %q", n)
					}
					fmt.Fprintf(e.stdout, "app %s deleted (dry run)\n", n)
					continue
				}
				if err := c.DeleteApp(e.ctx, n); err != nil {
					if errors.Is(err, adminclient.ErrNotFound) {
						return fmt.Errorf("unknown app %q", n)
					}
					return wrap("delete "+n, err)
				}
				fmt.Fprintf(e.stdout, "app %s deleted\n", n)
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "delete the apps these specs name (repeatable; - for stdin)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be deleted; delete nothing")
	return c
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
