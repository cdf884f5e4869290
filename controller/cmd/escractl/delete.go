package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/adminclient"
)

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
