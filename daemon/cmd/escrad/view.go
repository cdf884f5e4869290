package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/escra-dev/escra/daemon/agent"
)

// ViewCmd prepares the CPU view of a container started by hand with
// docker run (WYSIWYG containers), before it starts.
const ViewCmd = "view"

const viewUsage = "escrad view prepare NAME [--cpus R] [--view-dir DIR] [--print mount|path]"

// runView is escrad view prepare: it writes VIEW-DIR/NAME/online (⌈R⌉
// CPUs until escrad places the container and keeps the file equal to its
// cpuset) and prints what docker run --mount takes, so one command line
// starts the container with its truthful view:
//
//	docker run --name web --cpus 2 --label escra.app=shop --label escra.cpu=wysiwyg \
//	    --mount "$(escrad view prepare web --cpus 2)" nginx
func runView(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "prepare" {
		fmt.Fprintf(stderr, "escrad: usage: %s\n", viewUsage)
		return 2
	}
	fs := flag.NewFlagSet("escrad view prepare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cpus := fs.Float64("cpus", 0, "CPUs the container is given (its docker run --cpus); the view lists ⌈R⌉ (0: every CPU)")
	dir := fs.String("view-dir", agent.DefaultViewDir, "escrad's --view-dir")
	printWhat := fs.String("print", "mount", "mount: the --mount value; path: the view file's path (for -v PATH:"+agent.OnlinePath+":ro)")
	// NAME may come before or after the flags.
	rest := args[1:]
	var name string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: %s\n", viewUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "escrad: view prepare: %v (usage: %s)\n", err, viewUsage)
		return 2
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "escrad: view prepare: unexpected argument %q (usage: %s)\n", fs.Arg(0), viewUsage)
		return 2
	}
	if name == "" {
		fmt.Fprintf(stderr, "escrad: view prepare: give the container's name, as docker run --name NAME (usage: %s)\n", viewUsage)
		return 2
	}
	if *printWhat != "mount" && *printWhat != "path" {
		fmt.Fprintf(stderr, "escrad: view prepare: --print %q: want mount or path\n", *printWhat)
		return 2
	}
	p, err := agent.PrepareHandView(*dir, name, *cpus)
	if err != nil {
		if os.IsPermission(errors.Unwrap(err)) || os.IsPermission(err) {
			err = fmt.Errorf("%w (the view directory is escrad's: run as root, e.g. with sudo)", err)
		}
		fmt.Fprintf(stderr, "escrad: view prepare: %v\n", err)
		return 1
	}
	if *printWhat == "path" {
		fmt.Fprintln(stdout, p)
	} else {
		fmt.Fprintln(stdout, agent.ViewMount(p))
	}
	return 0
}
