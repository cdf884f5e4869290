// Command escractl is the command line for the controller: deploy specs, list
// apps, containers and hosts, and watch limits follow demand.
//
// Every mistake a user can make ends in one line on stderr and exit status 1
// (2 for a bad command line).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/version"
)

const usage = `usage: escractl [--controller URL] COMMAND [ARGS]

commands:
  apply -f FILE        validate a Distributed Container spec, set its budget and
                       create its containers on the hosts (--budget-only: budget
                       only; containers join with docker run --label escra.app=APP)
  delete APP           remove an app (its budget, and its containers)
  get apps|containers|hosts [-o table|json]
                       list what the controller knows
  top [APP] [--once]   live table of limits, usage and slack, every second
  events [APP]         limit changes and OOM verdicts as they happen
  validate -f FILE     check a spec without contacting the controller
  certs --hosts h1,h2 [--dir /etc/escra] [--controller-names n,ip] [--days 825]
                       create the CA (or reuse DIR/ca.pem) and mutual-TLS
                       certificates: controller.pem, HOST.pem (+ -key.pem)

flags:
  --controller URL     controller admin API (default $ESCRA_CONTROLLER or ` + adminclient.DefaultURL + `)
  --version            print the version and exit
`

// exitError carries an exit status; its message is the one line to print.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, a...)}
}

// env is what a command runs with; tests give it buffers and a test server.
type env struct {
	ctx        context.Context
	stdout     io.Writer
	stderr     io.Writer
	controller string
	width      int      // terminal columns; 0 when not a terminal
	tty        bool     // stdout is a terminal: top redraws in place
	term       *os.File // the terminal, to follow resizes; nil in tests
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}
	e.width, e.tty = terminalWidth(os.Stdout)
	if e.tty {
		e.term = os.Stdout
	}
	os.Exit(run(e, os.Args[1:]))
}

// run executes one command line and returns the exit status.
func run(e *env, args []string) int {
	err := dispatch(e, args)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, usage)
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")
	fmt.Fprintf(e.stderr, "escractl: %s\n", msg)
	return code
}

func dispatch(e *env, args []string) error {
	gf := flag.NewFlagSet("escractl", flag.ContinueOnError)
	gf.SetOutput(io.Discard)
	def := os.Getenv("ESCRA_CONTROLLER")
	if def == "" {
		def = adminclient.DefaultURL
	}
	ctl := gf.String("controller", def, "")
	showVersion := gf.Bool("version", false, "")
	if err := gf.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v (see escractl --help)", err)
	}
	if *showVersion {
		fmt.Fprintln(e.stdout, "escractl", version.Version)
		return nil
	}
	e.controller = *ctl
	rest := gf.Args()
	if len(rest) == 0 {
		return usageErr("no command given (commands: apply, delete, get, top, events, validate; see escractl --help)")
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "apply":
		return cmdApply(e, rest)
	case "validate":
		return cmdValidate(e, rest)
	case "delete":
		return cmdDelete(e, rest)
	case "get":
		return cmdGet(e, rest)
	case "top":
		return cmdTop(e, rest)
	case "events":
		return cmdEvents(e, rest)
	case "certs":
		return cmdCerts(e, rest)
	case "help":
		return flag.ErrHelp
	case "version":
		fmt.Fprintln(e.stdout, "escractl", version.Version)
		return nil
	}
	return usageErr("unknown command %q (commands: apply, delete, get, top, events, validate)", cmd)
}

// flags makes a command's flag set; every command also takes --controller, so
// it may be written after the command too.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("controller", "", func(s string) error { e.controller = s; return nil })
	return fs
}

// parse parses a command's flags, allowing flags after positional arguments
// ("top shop --once"), and returns the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (e *env) client() (*adminclient.Client, error) {
	return adminclient.New(e.controller)
}
