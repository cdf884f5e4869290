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
	var recursive bool
	var dryRun, selector string
	c := &cobra.Command{
		Use:   "delete APP... | -f FILE|DIR | -l SELECTOR",
		Short: "Remove apps: their containers on every host, then their budgets",
		Example: `  escractl delete shop
  escractl delete -f shop.yaml
  escractl delete -f specs/ -R
  escractl delete -l team=web --dry-run=server
  escractl delete --dry-run shop batch`,
		ValidArgsFunction: completeApps(e),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkDryRun("delete", &dryRun); err != nil {
				return err
			}
			var sel selectorFlag
			if err := sel.set(selector); err != nil {
				return usageErr("delete: %v", err)
			}
			ways := 0
			for _, given := range []bool{len(args) > 0, len(files) > 0, sel.given} {
				if given {
					ways++
				}
			}
			if ways > 1 {
				return usageErr("delete: give app names, -f FILE or -l SELECTOR, only one of them")
			}
			names := args
			if len(files) > 0 {
				apps, err := readSpecs(e, files, recursive)
				if err != nil {
					return err
				}
				names = nil
				for _, a := range apps {
					names = append(names, a.Name)
				}
			}
			if len(names) == 0 && !sel.given {
				return usageErr("delete: give an app name, -f FILE or -l SELECTOR")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if sel.given {
				apps, err := c.Apps(e.ctx)
				if err != nil {
					return err
				}
				for _, a := range selectApps(apps, sel.sel) {
					names = append(names, a.Name)
				}
				slices.Sort(names)
				if len(names) == 0 {
					fmt.Fprintf(e.stdout, "no apps match -l %s\n", selector)
					return nil
				}
			}
			for _, n := range names {
				if err := deleteOne(e, c, n, dryRun); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "delete the apps these specs name: a file or directory (repeatable; - for stdin)")
	c.Flags().BoolVarP(&recursive, "recursive", "R", false, "read the subdirectories of -f DIR too")
	c.Flags().StringVarP(&selector, "selector", "l", "", "delete the apps whose labels match, e.g. team=web,tier!=db")
	registerDryRun(c, &dryRun, "say what would be deleted; delete nothing")
	return c
}

func deleteOne(e *env, c *adminclient.Client, n, dryRun string) error {
	switch dryRun {
	case "client":
		apps, err := c.Apps(e.ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(apps, func(a adminclient.App) bool { return a.Name == n }) {
			return fmt.Errorf("unknown app %q", n)
		}
		fmt.Fprintf(e.stdout, "app %s deleted (dry run)\n", n)
		return nil
	case "server":
		k, err := c.CheckDelete(e.ctx, n)
		if errors.Is(err, adminclient.ErrNotFound) {
			return fmt.Errorf("unknown app %q", n)
		}
		if err != nil {
			return wrap("delete "+n, err)
		}
		fmt.Fprintf(e.stdout, "app %s deleted, %d containers removed (server dry run)\n", n, k)
		return nil
	}
	if err := c.DeleteApp(e.ctx, n); err != nil {
		if errors.Is(err, adminclient.ErrNotFound) {
			return fmt.Errorf("unknown app %q", n)
		}
		return wrap("delete "+n, err)
	}
	fmt.Fprintf(e.stdout, "app %s deleted\n", n)
	return nil
}
