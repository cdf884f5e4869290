package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// Config is escractl's config file ($ESCRACONFIG, else
// $XDG_CONFIG_HOME/escra/config.yaml or ~/.config/escra/config.yaml): named
// contexts, each a controller and the operator's certificate, as kubectl's
// kubeconfig holds clusters and users.
type Config struct {
	CurrentContext string          `yaml:"current-context,omitempty"`
	Contexts       []ConfigContext `yaml:"contexts,omitempty"`
}

// ConfigContext is one controller and how to reach it. Empty fields fall
// back to the flags' defaults.
type ConfigContext struct {
	Name       string `yaml:"name"`
	Controller string `yaml:"controller,omitempty"`
	Certs      string `yaml:"certs,omitempty"`
	TLSCA      string `yaml:"tls-ca,omitempty"`
	TLSCert    string `yaml:"tls-cert,omitempty"`
	TLSKey     string `yaml:"tls-key,omitempty"`
}

// configPath is where the config file is read and written.
func configPath() string {
	if p := os.Getenv("ESCRACONFIG"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "escra", "config.yaml")
}

// loadConfig reads the config file; a missing one is empty.
func loadConfig(p string) (*Config, error) {
	c := &Config{}
	if p == "" {
		return c, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %v", p, err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && len(strings.TrimSpace(string(b))) > 0 {
		return nil, fmt.Errorf("config %s: %s", p, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	seen := map[string]bool{}
	for _, x := range c.Contexts {
		if x.Name == "" {
			return nil, fmt.Errorf("config %s: a context has no name", p)
		}
		if seen[x.Name] {
			return nil, fmt.Errorf("config %s: context %q is given twice", p, x.Name)
		}
		seen[x.Name] = true
	}
	return c, nil
}

func (c *Config) find(name string) *ConfigContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

func (c *Config) save(p string) error {
	if p == "" {
		return errors.New("no config file: set $ESCRACONFIG or $HOME")
	}
	sort.Slice(c.Contexts, func(i, j int) bool { return c.Contexts[i].Name < c.Contexts[j].Name })
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("config %s: %v", p, err)
	}
	// Written whole, then renamed: a crash leaves the old file or the new.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("config %s: %v", p, err)
	}
	return os.Rename(tmp, p)
}

// applyContext fills what the command line and the environment left
// unset from the chosen context: flags, then $ESCRA_CONTROLLER and
// $ESCRA_CERTS, then the context, then the built-in defaults.
func (e *env) applyContext(cmd *cobra.Command) error {
	if cmd.Parent() != nil && cmd.Parent().Name() == "config" {
		return nil // config commands edit the file; a broken one must stay fixable
	}
	cfg, err := loadConfig(configPath())
	if err != nil {
		return err
	}
	name := e.context
	if name == "" {
		name = os.Getenv("ESCRA_CONTEXT")
	}
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		return nil
	}
	x := cfg.find(name)
	if x == nil {
		if e.context != "" {
			return usageErr("--context %q: no such context in %s (escractl config get-contexts)", name, configPath())
		}
		return fmt.Errorf("current context %q is not in %s (escractl config use-context NAME)", name, configPath())
	}
	f := cmd.Flags()
	set := func(flag, env, val string, dst *string) {
		if val == "" || f.Changed(flag) || (env != "" && os.Getenv(env) != "") {
			return
		}
		*dst = val
	}
	set("controller", "ESCRA_CONTROLLER", x.Controller, &e.controller)
	set("certs", "ESCRA_CERTS", x.Certs, &e.certs)
	if f.Changed("certs") || f.Changed("tls-cert") || f.Changed("tls-key") {
		return nil // the operator named a certificate: the context's files would override it
	}
	set("tls-ca", "", x.TLSCA, &e.tlsFiles.CA)
	set("tls-cert", "", x.TLSCert, &e.tlsFiles.Cert)
	set("tls-key", "", x.TLSKey, &e.tlsFiles.Key)
	return nil
}

func configCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "config get-contexts|current-context|use-context|set-context|delete-context",
		Short: "Name controllers in escractl's config file and switch between them",
		Long: `config edits escractl's config file ($ESCRACONFIG, else
~/.config/escra/config.yaml): contexts, each a controller URL and the
operator's certificate (a certs directory, or CA, certificate and key
files). The current context, or --context NAME, supplies what the flags
and $ESCRA_CONTROLLER / $ESCRA_CERTS leave unset.`,
		Example: `  escractl config set-context prod --controller https://ctl.example:7472 --certs ~/escra/prod
  escractl config use-context prod
  escractl config get-contexts
  escractl --context lab get hosts`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("config: unknown subcommand %q (get-contexts, current-context, use-context, set-context, delete-context)", args[0])
			}
			return usageErr("config: give a subcommand (get-contexts, current-context, use-context, set-context, delete-context)")
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	exact := func(n int, what string) cobra.PositionalArgs {
		return func(cmd *cobra.Command, args []string) error {
			if len(args) != n {
				return usageErr("config %s: %s", cmd.Name(), what)
			}
			return nil
		}
	}
	get := &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(configPath())
			if err != nil {
				return err
			}
			t := newTable(nil, "CURRENT", "NAME", "CONTROLLER", "CERTS")
			for _, x := range cfg.Contexts {
				cur := ""
				if x.Name == cfg.CurrentContext {
					cur = "*"
				}
				certs := x.Certs
				if x.TLSCert != "" {
					certs = x.TLSCert
				}
				t.add(cur, x.Name, dash(x.Controller), dash(certs))
			}
			t.write(e.stdout, e.width)
			return nil
		},
	}
	current := &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(configPath())
			if err != nil {
				return err
			}
			if cfg.CurrentContext == "" {
				return fmt.Errorf("no current context in %s (escractl config use-context NAME)", configPath())
			}
			fmt.Fprintln(e.stdout, cfg.CurrentContext)
			return nil
		},
	}
	use := &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the current context",
		Args:  exact(1, "give one context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := configPath()
			cfg, err := loadConfig(p)
			if err != nil {
				return err
			}
			if cfg.find(args[0]) == nil {
				return fmt.Errorf("no context %q in %s (escractl config set-context %s --controller URL)", args[0], p, args[0])
			}
			cfg.CurrentContext = args[0]
			if err := cfg.save(p); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "switched to context %q\n", args[0])
			return nil
		},
	}
	var x ConfigContext
	set := &cobra.Command{
		Use:   "set-context NAME [--controller URL] [--certs DIR] [--tls-ca F --tls-cert F --tls-key F]",
		Short: "Create a context or change the fields given",
		Args:  exact(1, "give one context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := configPath()
			cfg, err := loadConfig(p)
			if err != nil {
				return err
			}
			if x.Controller != "" && !strings.Contains(x.Controller, "://") {
				return usageErr("config set-context: --controller %q: give a URL, https://HOST:PORT or http://HOST:PORT", x.Controller)
			}
			cur := cfg.find(args[0])
			what := "modified"
			if cur == nil {
				cfg.Contexts = append(cfg.Contexts, ConfigContext{Name: args[0]})
				cur = &cfg.Contexts[len(cfg.Contexts)-1]
				what = "created"
			}
			f := cmd.Flags()
			for flag, pair := range map[string][2]*string{"controller": {&cur.Controller, &x.Controller}, "certs": {&cur.Certs, &x.Certs},
				"tls-ca": {&cur.TLSCA, &x.TLSCA}, "tls-cert": {&cur.TLSCert, &x.TLSCert}, "tls-key": {&cur.TLSKey, &x.TLSKey}} {
				if f.Changed(flag) {
					*pair[0] = *pair[1]
				}
			}
			if (cur.TLSCert == "") != (cur.TLSKey == "") {
				return usageErr("config set-context: --tls-cert and --tls-key go together")
			}
			if err := cfg.save(p); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "context %q %s in %s\n", args[0], what, p)
			return nil
		},
	}
	// Local flags of the same names as the root's persistent ones: here
	// they are the context's fields, not a connection for this command.
	sf := set.Flags()
	sf.StringVar(&x.Controller, "controller", "", "controller admin API URL")
	sf.StringVar(&x.Certs, "certs", "", "directory of admin.pem or viewer.pem and ca.pem")
	sf.StringVar(&x.TLSCA, "tls-ca", "", "CA file")
	sf.StringVar(&x.TLSCert, "tls-cert", "", "operator certificate file")
	sf.StringVar(&x.TLSKey, "tls-key", "", "its key file")
	del := &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Remove a context",
		Args:  exact(1, "give one context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := configPath()
			cfg, err := loadConfig(p)
			if err != nil {
				return err
			}
			if cfg.find(args[0]) == nil {
				return fmt.Errorf("no context %q in %s", args[0], p)
			}
			kept := cfg.Contexts[:0]
			for _, c := range cfg.Contexts {
				if c.Name != args[0] {
					kept = append(kept, c)
				}
			}
			cfg.Contexts = kept
			if cfg.CurrentContext == args[0] {
				cfg.CurrentContext = ""
			}
			if err := cfg.save(p); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "context %q deleted\n", args[0])
			return nil
		},
	}
	c.AddCommand(get, current, use, set, del)
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
