package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/spec"
)

func validateCmd(e *env) *cobra.Command {
	var files []string
	var recursive bool
	c := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check specs without contacting the controller",
		Long: `validate checks specs (docs/spec.md) and prints the bootstrap limits each
replica would start with (Escra §IV-A eq. 2). Every problem is listed.`,
		Example: `  escractl validate -f shop.yaml
  cat shop.yaml | escractl validate -f -`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, apps, err := specFiles(e, cmd, files, args, recursive)
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
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file or directory (repeatable; - for stdin)")
	c.Flags().BoolVarP(&recursive, "recursive", "R", false, "read the subdirectories of -f DIR too")
	return c
}

func printPlan(e *env, file string, app *spec.App) {
	fmt.Fprintf(e.stdout, "%s: app %s is valid: %d containers, %g cores, %s\n", file, app.Name, app.Replicas(), app.CPU, spec.FormatBytes(app.MemoryBytes))
	if len(app.Containers) == 0 {
		return
	}
	// The bootstrap limits each replica would start with (Escra §IV-A eq. 2).
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
