// Command escractl is the command line for the controller: deploy specs, list
// apps, containers and hosts, and watch limits follow demand.
//
// Every mistake a user can make ends in one line on stderr and exit status 1
// (2 for a bad command line).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/auth"
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
  get functions [NAME] [--gateway URL], top [NAME] --gateway URL
                       escra-gateway's functions: replicas, queue, capacity, predicted rate
  events [APP]         limit changes and OOM verdicts as they happen
  validate -f FILE     check a spec without contacting the controller
  certs --hosts h1,h2 [--dir /etc/escra] [--controller-names n,ip] [--days 825]
                       create the CA (or reuse DIR/ca.pem) and mutual-TLS
                       certificates: controller.pem, HOST.pem, and the
                       operators' admin.pem and viewer.pem (+ -key.pem)

flags:
  --controller URL     controller admin API (default $ESCRA_CONTROLLER or ` + adminclient.DefaultURL + `;
                       http://HOST:PORT for a controller run --insecure)
  --certs DIR          operator certificate: DIR/admin.pem, else DIR/viewer.pem,
                       and DIR/ca.pem (default $ESCRA_CERTS or /etc/escra)
  --tls-cert FILE --tls-key FILE --tls-ca FILE
                       the operator certificate's files, instead of --certs
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
	certs      string // directory of admin.pem / viewer.pem and ca.pem
	tlsFiles   auth.Files
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
	certDir := os.Getenv("ESCRA_CERTS")
	if certDir == "" {
		certDir = auth.DefaultDir
	}
	gf.StringVar(&e.certs, "certs", certDir, "")
	gf.StringVar(&e.tlsFiles.Cert, "tls-cert", "", "")
	gf.StringVar(&e.tlsFiles.Key, "tls-key", "", "")
	gf.StringVar(&e.tlsFiles.CA, "tls-ca", "", "")
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
	fs.Func("certs", "", func(s string) error { e.certs = s; return nil })
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

// client talks to the controller: HTTPS with the operator's certificate
// unless the URL says http://.
func (e *env) client() (*adminclient.Client, error) {
	if strings.HasPrefix(e.controller, "http://") {
		return adminclient.New(e.controller)
	}
	if _, err := adminclient.NewTLS(e.controller, &tls.Config{}); err != nil {
		return nil, err // a bad URL is named before missing certificates
	}
	tc, err := e.operatorTLS()
	if err != nil {
		return nil, err
	}
	return adminclient.NewTLS(e.controller, tc)
}

// operatorTLS loads --tls-* when given, else DIR/admin.pem or, for an
// operator who only has one, DIR/viewer.pem.
func (e *env) operatorTLS() (*tls.Config, error) {
	f := e.tlsFiles
	if f.Cert != "" || f.Key != "" {
		if f.Cert == "" || f.Key == "" {
			return nil, usageErr("--tls-cert and --tls-key go together")
		}
		if f.CA == "" {
			f.CA = auth.CAPath(e.certs)
		}
		tc, err := auth.ClientConfig(f, "")
		if err != nil {
			return nil, fmt.Errorf("operator certificate: %v", err)
		}
		return tc, nil
	}
	role := auth.RoleAdmin
	if _, err := os.Stat(auth.CertPath(e.certs, role)); err != nil {
		if _, err2 := os.Stat(auth.CertPath(e.certs, auth.RoleViewer)); err2 == nil {
			role = auth.RoleViewer
		}
	}
	tc, err := adminclient.OperatorTLS(e.certs, role)
	if err != nil {
		return nil, fmt.Errorf("no operator certificate in %s: %v (escractl certs --dir %s makes admin.pem; or --certs DIR, or --controller http://HOST:PORT for a controller run --insecure)", e.certs, err, e.certs)
	}
	return tc, nil
}
