package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

func applyCmd(e *env) *cobra.Command {
	var files []string
	var budgetOnly, recursive bool
	var dryRun string
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
  escractl apply -f specs/ -R --dry-run=server
  escractl get apps shop -o yaml | sed 's/replicas: 3/replicas: 4/' | escractl apply -f -
  escractl apply --budget-only -f budgets.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkDryRun("apply", &dryRun); err != nil {
				return err
			}
			// Validate everything before touching the controller: a bad
			// spec changes nothing.
			_, apps, err := specFiles(e, cmd, files, args, recursive)
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
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file or directory (repeatable; - for stdin)")
	c.Flags().BoolVarP(&recursive, "recursive", "R", false, "read the subdirectories of -f DIR too")
	c.Flags().BoolVar(&budgetOnly, "budget-only", false, "set the budget only; leave containers as they are")
	registerDryRun(c, &dryRun, "print what would change; change nothing")
	return c
}

func applyOne(e *env, c *adminclient.Client, l *live, app *spec.App, budgetOnly bool, dryRun string) error {
	cur, existed, want := l.target(app, budgetOnly)
	containersToo := !budgetOnly && len(app.Containers) > 0
	allRun := true
	for _, ct := range Containers(app) {
		allRun = allRun && l.running[app.Name][ct.Name]
	}
	suffix := ""
	switch dryRun {
	case "client":
		suffix = " (dry run)"
	case "server":
		suffix = " (server dry run)"
	}
	if existed && !cur.Auto && liveDoc(cur).Equal(want) && (!containersToo || allRun) {
		fmt.Fprintf(e.stdout, "app %s unchanged%s\n", app.Name, suffix)
		return nil
	}
	if dryRun != "" {
		what := "created"
		if existed {
			what = "configured"
		}
		var accepted *adminclient.App
		if dryRun == "server" {
			// The controller checks the budget as it would apply it.
			b := Budget(app)
			b.Spec = &want
			a, err := c.CheckApp(e.ctx, b)
			if err != nil {
				return wrap("apply "+app.Name, err)
			}
			accepted = &a
		}
		defer func() {
			if accepted != nil {
				fmt.Fprintf(e.stdout, "  controller accepts: %s cores, %s, policy %s, mode %s\n", cores(accepted.CPUCores),
					spec.FormatBytes(accepted.MemoryBytes), accepted.Policy, accepted.Mode)
			}
		}()
		lines := planLines(planFrom(cur, existed, want), want)
		if !containersToo {
			lines = slices.DeleteFunc(lines, func(s string) bool {
				return !strings.HasPrefix(s, "budget") && !strings.HasPrefix(s, "mode") && !strings.HasPrefix(s, "max")
			})
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

// wrap prefixes what was being done, except for an unreachable controller,
// whose message already says everything.
func wrap(what string, err error) error {
	var ue *adminclient.UnreachableError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// registerDryRun adds kubectl's --dry-run[=client|server]: client
// decides from what the controller shows, server also has the controller
// validate the change without storing or applying it.
func registerDryRun(c *cobra.Command, v *string, usage string) {
	c.Flags().StringVar(v, "dry-run", "", usage+": client (escractl decides) or server (the controller validates too)")
	c.Flags().Lookup("dry-run").NoOptDefVal = "client"
}

// checkDryRun refuses an unknown mode and turns "none" into "".
func checkDryRun(cmd string, v *string) error {
	switch *v {
	case "none":
		*v = ""
		return nil
	case "", "client", "server":
		return nil
	}
	return usageErr("%s: --dry-run=%q: want client or server", cmd, *v)
}
