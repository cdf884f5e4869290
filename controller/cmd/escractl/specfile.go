package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/spec"
)

// readSpecs reads every app in the -f files ("-" is stdin), in order;
// every problem in every file is reported. A directory stands for its
// .yaml, .yml and .json files in name order, and with recursive for
// those of its subdirectories too (kubectl's -f DIR and -R).
func readSpecs(e *env, files []string, recursive bool) ([]*spec.App, error) {
	files, err := expandDirs(files, recursive)
	if err != nil {
		return nil, err
	}
	var apps []*spec.App
	var all spec.Errors
	seen := map[string]string{}
	for _, f := range files {
		var data []byte
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

// specFiles reads the specs a command was given (-f, or one positional
// argument): the file names and every app in them, validated.
func specFiles(e *env, cmd *cobra.Command, files, args []string, recursive bool) ([]string, []*spec.App, error) {
	fs, err := fileArgs(cmd, files, args)
	if err != nil {
		return nil, nil, err
	}
	apps, err := readSpecs(e, fs, recursive)
	if err != nil {
		return nil, nil, err
	}
	return fs, apps, nil
}

// specExt are the file names a directory given to -f is read for.
var specExt = []string{".yaml", ".yml", ".json"}

// expandDirs replaces each directory in files by its spec files.
func expandDirs(files []string, recursive bool) ([]string, error) {
	var out []string
	for _, f := range files {
		st, err := os.Stat(f)
		if f == "-" || err != nil || !st.IsDir() {
			out = append(out, f) // read (and its error reported) as a file
			continue
		}
		var found []string
		err = filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != f && !recursive {
					return filepath.SkipDir
				}
				return nil
			}
			if slices.Contains(specExt, strings.ToLower(filepath.Ext(p))) {
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(found) == 0 {
			hint := ""
			if !recursive {
				hint = " (-R reads its subdirectories too)"
			}
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json files in the directory%s", f, hint)
		}
		out = append(out, found...)
	}
	return out, nil
}
