package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/spec"
)

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

// specFiles reads the specs a command was given (-f, or one positional
// argument): the file names and every app in them, validated.
func specFiles(e *env, cmd *cobra.Command, files, args []string) ([]string, []*spec.App, error) {
	fs, err := fileArgs(cmd, files, args)
	if err != nil {
		return nil, nil, err
	}
	apps, err := readSpecs(e, fs)
	if err != nil {
		return nil, nil, err
	}
	return fs, apps, nil
}
