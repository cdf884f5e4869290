package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func diffCmd(e *env) *cobra.Command {
	var files []string
	var budgetOnly, recursive bool
	c := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show how specs differ from what the controller runs",
		Long: `diff prints, per app, a unified diff of the spec the controller holds
against the one apply -f would make it hold, then what apply would do.
It exits 0 when nothing differs, 1 when something does, and 2 or more on
an error (a bad spec or command line, an unreachable controller), like
diff(1) and kubectl diff.`,
		Example: `  escractl diff -f shop.yaml
  escractl diff -f specs/ -R`,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runDiff(e, cmd, files, args, budgetOnly, recursive)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				// 1 means "differs": a failure must not read as one.
				return &exitError{code: 2, err: err}
			}
			return err
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "spec file or directory (repeatable; - for stdin)")
	c.Flags().BoolVarP(&recursive, "recursive", "R", false, "read the subdirectories of -f DIR too")
	c.Flags().BoolVar(&budgetOnly, "budget-only", false, "compare as apply --budget-only would apply")
	return c
}

func runDiff(e *env, cmd *cobra.Command, files, args []string, budgetOnly, recursive bool) error {
	fs, apps, err := specFiles(e, cmd, files, args, recursive)
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
		cur, existed, want := l.target(app, budgetOnly)
		var from []byte
		if existed {
			from, _ = yaml.Marshal(liveDoc(cur))
		}
		to, _ := yaml.Marshal(want)
		if existed && bytes.Equal(from, to) {
			continue
		}
		differ = true
		fmt.Fprintf(e.stdout, "--- live/%s\n+++ %s/%s\n", app.Name, strings.Join(fs, ","), app.Name)
		for _, ln := range lineDiff(splitLines(string(from)), splitLines(string(to))) {
			fmt.Fprintln(e.stdout, ln)
		}
		for _, ln := range planLines(planFrom(cur, existed, want), want) {
			fmt.Fprintf(e.stdout, "# apply would %s\n", ln)
		}
	}
	if differ {
		return &exitError{code: 1}
	}
	return nil
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
