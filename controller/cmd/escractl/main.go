// Command escractl is the command line for the controller: apply specs
// declaratively, list and describe apps, containers and hosts, and watch
// limits follow demand. Its commands and flags follow kubectl's where one
// exists (get -o, -l, -w, apply -f DIR -R, diff, --dry-run=client|server,
// describe, delete -f, config contexts).
//
// A mistake ends in one line per problem on stderr, each starting
// "escractl: ", and exit status 1 (2 for a bad command line). diff exits 1
// for "differs" and 2 for any failure, as diff(1) does.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
)

// exitError carries an exit status; its message is the one line to print
// ("" prints nothing: diff's "differences found").
type exitError struct {
	code int
	msg  string
	err  error // printed as any error is, when msg is ""
}

func (e *exitError) Error() string {
	if e.msg == "" && e.err != nil {
		return e.err.Error()
	}
	return e.msg
}

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, a...)}
}

// env is what a command runs with; tests give it buffers and a test server.
type env struct {
	ctx        context.Context
	stdin      io.Reader
	stdout     io.Writer
	stderr     io.Writer
	controller string
	context    string // --context: a context of the config file
	certs      string // directory of admin.pem / viewer.pem and ca.pem
	tlsFiles   auth.Files
	width      int      // terminal columns; 0 when not a terminal
	tty        bool     // stdout is a terminal: top redraws in place
	term       *os.File // the terminal, to follow resizes; nil in tests
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{ctx: ctx, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	e.width, e.tty = terminalWidth(os.Stdout)
	if e.tty {
		e.term = os.Stdout
	}
	os.Exit(run(e, os.Args[1:]))
}

// run executes one command line and returns the exit status.
func run(e *env, args []string) int {
	if e.stdin == nil {
		e.stdin = strings.NewReader("")
	}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(e.ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.msg == "" && ee.err == nil {
			return code
		}
	}
	// A spec's problems, one a line, as kubectl lists them; anything else
	// on one line.
	var lines []string
	var se spec.Errors
	if errors.As(err, &se) {
		for _, p := range se {
			lines = append(lines, p.Error())
		}
	} else {
		lines = []string{strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")}
	}
	for _, l := range lines {
		fmt.Fprintf(e.stderr, "escractl: %s\n", l)
	}
	return code
}

// newRoot builds the command tree.
func newRoot(e *env) *cobra.Command {
	showVersion := false
	root := &cobra.Command{
		Use:   "escractl",
		Short: "Operate Escra's Distributed Containers through the controller",
		Long: `escractl applies Distributed Container specs (docs/spec.md) to the controller,
lists and describes apps, containers and hosts, and shows limits following
demand (top, events).

The controller's admin API is --controller (default $ESCRA_CONTROLLER or
` + adminclient.DefaultURL + `; http://HOST:PORT for a controller run --insecure),
reached with the operator certificate in --certs (default $ESCRA_CERTS or
/etc/escra: admin.pem, else viewer.pem, and ca.pem). What flags and those
variables leave unset comes from the current context of the config file
($ESCRACONFIG, else ~/.config/escra/config.yaml; escractl config).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return e.applyContext(cmd)
		},
		// Unknown commands are a usage error (exit 2), not a cobra message.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q (commands: %s; see escractl --help)", args[0], commandList(cmd))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if showVersion {
				fmt.Fprintln(e.stdout, "escractl", version.Version)
				return nil
			}
			return usageErr("no command given (commands: %s; see escractl --help)", commandList(cmd))
		},
	}
	def := os.Getenv("ESCRA_CONTROLLER")
	if def == "" {
		def = adminclient.DefaultURL
	}
	certDir := os.Getenv("ESCRA_CERTS")
	if certDir == "" {
		certDir = auth.DefaultDir
	}
	pf := root.PersistentFlags()
	pf.StringVar(&e.controller, "controller", def, "controller admin API URL ($ESCRA_CONTROLLER)")
	pf.StringVar(&e.context, "context", "", "context of the config file to use ($ESCRA_CONTEXT; default its current-context)")
	pf.StringVar(&e.certs, "certs", certDir, "directory of the operator certificate: admin.pem or viewer.pem, and ca.pem ($ESCRA_CERTS)")
	pf.StringVar(&e.tlsFiles.Cert, "tls-cert", "", "operator certificate file, instead of --certs")
	pf.StringVar(&e.tlsFiles.Key, "tls-key", "", "its key file")
	pf.StringVar(&e.tlsFiles.CA, "tls-ca", "", "the CA that signed the controller's certificate (default CERTS/ca.pem)")
	root.Flags().BoolVar(&showVersion, "version", false, "print escractl's version and exit")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if !c.HasParent() {
			return usageErr("%v (see escractl --help)", err)
		}
		return usageErr("%s: %v (see %s --help)", c.Name(), err, c.CommandPath())
	})
	root.AddCommand(applyCmd(e), diffCmd(e), validateCmd(e), deleteCmd(e), getCmd(e), describeCmd(e),
		topCmd(e), eventsCmd(e), versionCmd(e), certsCmd(e), profileCmd(e), configCmd(e))
	root.CompletionOptions.HiddenDefaultCmd = false
	return root
}

func commandList(root *cobra.Command) string {
	var names []string
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s: unexpected argument %q", cmd.Name(), args[0])
	}
	return nil
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErr("%s: at most %s", cmd.Name(), what)
		}
		return nil
	}
}

// completeApps offers the controller's app names to shell completion.
func completeApps(e *env) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		c, err := e.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		apps, err := c.Apps(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, a := range apps {
			if strings.HasPrefix(a.Name, prefix) {
				out = append(out, a.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
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

func versionCmd(e *env) *cobra.Command {
	clientOnly := false
	c := &cobra.Command{
		Use:   "version",
		Short: "Print escractl's version and the controller's",
		Example: `  escractl version
  escractl version --client`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(e.stdout, "escractl", version.Version)
			if clientOnly {
				return nil
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			v, err := c.Version(e.ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "controller %s (%s, %s)\n", v.Version, v.Go, c.URL())
			return nil
		},
	}
	c.Flags().BoolVar(&clientOnly, "client", false, "only escractl's version; do not ask the controller")
	return c
}

func certsCmd(e *env) *cobra.Command {
	var dir, hosts, apps, names, user, role string
	var days int
	c := &cobra.Command{
		Use:   "certs --hosts h1,h2 --apps web,db [--dir DIR] | --user NAME [--role admin|viewer|scaler]",
		Short: "Create the CA and the mutual-TLS certificates of the controller, hosts and operators",
		Long: `certs creates the CA (or reuses DIR/ca.pem and ca-key.pem) and issues
controller.pem, HOST.pem for every host, and the operators' admin.pem,
viewer.pem and scaler.pem (each with its -key.pem; scaler.pem may only read
and add or remove an app's containers: escra-gateway's). The host
certificates bind their hosts to the --apps: the controller takes
registrations of those apps' containers only (* binds every app). A host
bound to none registers nothing until its certificate is reissued or the
controller's --host-apps names it.

--user NAME issues only DIR/NAME.pem (+key) from the existing CA: one
operator's certificate, whose name the controller's audit log gives for
every write it makes, with --role (default viewer). Certificates live
--days (30 by default; a new CA 10 years): issue new ones before they
expire, and escra-controller and escrad load them without a restart
(docs/security.md, "Identities").`,
		Example: `  escractl certs --dir /etc/escra --hosts h1,h2,h3 --apps web,db --controller-names ctl.example,127.0.0.1
  escractl certs --dir /etc/escra --user alice --role admin
  escractl --tls-cert /etc/escra/alice.pem --tls-key /etc/escra/alice-key.pem get apps`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("dir") {
				dir = e.certs
			}
			if user != "" && !cmd.Flags().Changed("role") {
				role = auth.RoleViewer
			}
			return runCerts(e, dir, hosts, apps, names, user, role, days)
		},
	}
	c.Flags().StringVar(&dir, "dir", auth.DefaultDir, "directory for the CA and certificates (default --certs)")
	c.Flags().StringVar(&hosts, "hosts", "", "comma-separated host ids to issue certificates for")
	c.Flags().StringVar(&apps, "apps", "", "comma-separated apps the host certificates may register containers of (* for any app)")
	c.Flags().StringVar(&names, "controller-names", "", "comma-separated DNS names and IPs the controller's certificate is valid for")
	c.Flags().StringVar(&user, "user", "", "issue only this operator's certificate (DIR/NAME.pem) from the existing CA")
	c.Flags().StringVar(&role, "role", "", "--user: the operator's role: admin, viewer (default) or scaler")
	c.Flags().IntVar(&days, "days", int(auth.DefaultValidity/(24*time.Hour)), "validity of the issued certificates in days (a new CA: 10 years)")
	return c
}
