// Command mkdeb builds the Debian packages escrad, escra-controller (with
// escractl), escra-gateway and escra-dkms from bin/ and the tree, with nfpm (no hand-rolled
// archives). `make deb` runs it; the packages land in dist/.
//
//	mkdeb --version 0.1.0 --bin bin --out dist
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
)

const maintainer = "Escra maintainers <escra@localhost>"

// options say where the inputs are and where the packages go.
type options struct {
	Version string // scripts/version.sh: 0.3.0, 0.3.0~5.g1a2b3c4 or 0.3.0+5.g1a2b3c4
	Bin     string // escrad, escra-controller, escractl
	Root    string // the source tree (packaging/, kmod/, docs/)
	Out     string
}

func main() {
	var o options
	flag.StringVar(&o.Version, "version", "", "package version (git describe output is turned into a Debian version)")
	flag.StringVar(&o.Bin, "bin", "bin", "directory holding escrad, escra-controller, escractl and escra-gateway")
	flag.StringVar(&o.Root, "root", ".", "source tree")
	flag.StringVar(&o.Out, "out", "dist", "output directory")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkdeb: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	debs, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
	for _, d := range debs {
		fmt.Println(d)
	}
}

var debVersionRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*([-+~][A-Za-z0-9.+~-]*)?$`)

// describeRE is git describe's "v1.2.3-4-g1a2b3c4[-dirty]".
var describeRE = regexp.MustCompile(`^([0-9]+\.[0-9]+\.[0-9]+)-([0-9]+)-(g[0-9a-f]+)(-dirty)?$`)

// DebVersion turns a build version (scripts/version.sh's 1.2.3,
// 1.2.3~4.g1a2b3c4 or 1.2.3+4.g1a2b3c4, a tag like v1.2.3, git describe's
// "v1.2.3-4-g1a2b3c4" or "1a2b3c4-dirty", or "dev") into a valid Debian
// version. A hyphen would start a Debian revision, so describe's commits
// after a tag become "+N.gHASH", which sorts after the release.
func DebVersion(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if m := describeRE.FindStringSubmatch(v); m != nil {
		v = m[1] + "+" + m[2] + "." + m[3]
		if m[4] != "" {
			v += ".dirty"
		}
	}
	if debVersionRE.MatchString(v) {
		return v
	}
	clean := regexp.MustCompile(`[^A-Za-z0-9.+~]`).ReplaceAllString(v, ".")
	if clean == "" {
		clean = "dev"
	}
	return "0.0.0~" + clean
}

type pkg struct {
	name, arch, desc string
	license          string
	copyright        []copyrightStanza
	depends          []string
	recommends       []string
	contents         files.Contents
	scripts          nfpm.Scripts
}

func build(o options) ([]string, error) {
	if o.Version == "" {
		return nil, fmt.Errorf("--version is required")
	}
	ver := DebVersion(o.Version)
	for _, b := range []string{"escrad", "escra-controller", "escractl", "escra-gateway"} {
		if st, err := os.Stat(filepath.Join(o.Bin, b)); err != nil || st.IsDir() {
			return nil, fmt.Errorf("%s missing: run make build first", filepath.Join(o.Bin, b))
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "mkdeb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	p := func(rel string) string { return filepath.Join(o.Root, rel) }
	// subst writes a copy of a template with @KEY@ replaced.
	subst := func(src string, kv ...string) (string, error) {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		s := string(b)
		for i := 0; i+1 < len(kv); i += 2 {
			s = strings.ReplaceAll(s, "@"+kv[i]+"@", kv[i+1])
		}
		dst := filepath.Join(tmp, fmt.Sprintf("%d-%s", time.Now().UnixNano(), filepath.Base(src)))
		return dst, os.WriteFile(dst, []byte(s), 0o644)
	}
	serviceScripts := func(unit string) (nfpm.Scripts, error) {
		var s nfpm.Scripts
		var err error
		if s.PostInstall, err = subst(p("packaging/scripts/service-postinst.sh"), "UNIT", unit); err != nil {
			return s, err
		}
		if s.PreRemove, err = subst(p("packaging/scripts/service-prerm.sh"), "UNIT", unit); err != nil {
			return s, err
		}
		s.PostRemove, err = subst(p("packaging/scripts/service-postrm.sh"), "UNIT", unit)
		return s, err
	}
	bin := func(name string) *files.Content {
		return &files.Content{Source: filepath.Join(o.Bin, name), Destination: "/usr/bin/" + name,
			FileInfo: &files.ContentFileInfo{Mode: 0o755}}
	}
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	conf := func(src, dst string) *files.Content {
		return &files.Content{Source: src, Destination: dst, Type: files.TypeConfigNoReplace,
			FileInfo: &files.ContentFileInfo{Mode: 0o644}}
	}
	doc := func(pkgName string) *files.Content {
		return file(p("docs/operator.md"), "/usr/share/doc/"+pkgName+"/operator.md", 0o644)
	}

	daemonScripts, err := serviceScripts("escrad.service")
	if err != nil {
		return nil, err
	}
	ctlScripts, err := serviceScripts("escra-controller.service")
	if err != nil {
		return nil, err
	}
	gwScripts, err := serviceScripts("escra-gateway.service")
	if err != nil {
		return nil, err
	}
	// kmod/dkms.conf is the module's own recipe; the package version
	// replaces its PACKAGE_VERSION so /usr/src/escra-VERSION matches.
	dkmsSrc, err := os.ReadFile(p("kmod/dkms.conf"))
	if err != nil {
		return nil, err
	}
	verLine := regexp.MustCompile(`(?m)^PACKAGE_VERSION=.*$`)
	if !verLine.Match(dkmsSrc) {
		return nil, fmt.Errorf("kmod/dkms.conf has no PACKAGE_VERSION line")
	}
	dkmsConf := filepath.Join(tmp, "dkms.conf")
	if err := os.WriteFile(dkmsConf, verLine.ReplaceAll(dkmsSrc, []byte(`PACKAGE_VERSION="`+ver+`"`)), 0o644); err != nil {
		return nil, err
	}
	var dkmsScripts nfpm.Scripts
	if dkmsScripts.PostInstall, err = subst(p("packaging/scripts/dkms-postinst.sh"), "VERSION", ver); err != nil {
		return nil, err
	}
	if dkmsScripts.PreRemove, err = subst(p("packaging/scripts/dkms-prerm.sh"), "VERSION", ver); err != nil {
		return nil, err
	}
	src := "/usr/src/escra-" + ver + "/"
	dkmsFiles := files.Contents{file(dkmsConf, src+"dkms.conf", 0o644)}
	for _, f := range []string{"Kbuild", "Makefile", "escra.c", "escra_uapi.h"} {
		dkmsFiles = append(dkmsFiles, file(p("kmod/"+f), src+f, 0o644))
	}

	pkgs := []pkg{
		{
			name: "escrad", arch: "amd64",
			desc: "Escra host agent\n" +
				" escrad finds Docker containers labelled escra.app=APP, streams their\n" +
				" per-period CPU telemetry to the Escra controller, forwards OOM requests\n" +
				" and applies the CPU and memory limits the controller decides.",
			recommends: []string{"docker.io | docker-ce", "escra-dkms"},
			license:    licGo + " and " + licKernel,
			copyright: []copyrightStanza{
				{files: "*", license: licGo, comment: goModules},
				{files: "daemon/source/bpf/c/*", license: licKernel,
					comment: "The BPF program of escrad's bpf backend, built into /usr/bin/escrad."},
			},
			contents: files.Contents{
				bin("escrad"),
				file(p("packaging/systemd/escrad.service"), "/lib/systemd/system/escrad.service", 0o644),
				conf(p("packaging/etc/escrad.yaml"), "/etc/escra/escrad.yaml"),
				conf(p("packaging/etc/escrad.env"), "/etc/escra/escrad.env"),
				doc("escrad"),
			},
			scripts: daemonScripts,
		},
		{
			name: "escra-controller", arch: "amd64",
			desc: "Escra controller and escractl\n" +
				" escra-controller keeps the Distributed Containers: global CPU and memory\n" +
				" pools shared by containers on many hosts, with the event-driven resource\n" +
				" allocator. escractl deploys specs and shows limits live.",
			contents: files.Contents{
				bin("escra-controller"), bin("escractl"),
				file(p("packaging/systemd/escra-controller.service"), "/lib/systemd/system/escra-controller.service", 0o644),
				conf(p("packaging/etc/escra-controller.env"), "/etc/escra/escra-controller.env"),
				doc("escra-controller"),
				file(p("docs/spec.md"), "/usr/share/doc/escra-controller/spec.md", 0o644),
				file(p("docs/examples/shop.yaml"), "/usr/share/doc/escra-controller/examples/shop.yaml", 0o644),
				file(p("docs/examples/minimal.yaml"), "/usr/share/doc/escra-controller/examples/minimal.yaml", 0o644),
				file(p("packaging/grafana/escra-dashboard.json"), "/usr/share/escra/grafana/escra-dashboard.json", 0o644),
				file(p("packaging/prometheus/escra-alerts.yml"), "/usr/share/escra/prometheus/escra-alerts.yml", 0o644),
			},
			license:   licGo,
			copyright: []copyrightStanza{{files: "*", license: licGo, comment: goModules}},
			scripts:   ctlScripts,
		},
		{
			name: "escra-gateway", arch: "amd64",
			desc: "Escra Mu gateway\n" +
				" escra-gateway is the ingress of Mu-style serverless functions: it\n" +
				" balances requests over a function's replicas, admits them against the\n" +
				" SLO and scales each function through the Escra controller, within\n" +
				" the function's app budget, with a certificate that may only scale.",
			recommends: []string{"escra-controller"},
			contents: files.Contents{
				bin("escra-gateway"),
				file(p("packaging/systemd/escra-gateway.service"), "/lib/systemd/system/escra-gateway.service", 0o644),
				conf(p("packaging/etc/escra-gateway.env"), "/etc/escra/escra-gateway.env"),
				file(p("docs/mu.md"), "/usr/share/doc/escra-gateway/mu.md", 0o644),
				file(p("docs/examples/functions.json"), "/usr/share/doc/escra-gateway/examples/functions.json", 0o644),
			},
			scripts:   gwScripts,
			copyright: []copyrightStanza{{files: "*", license: licGo, comment: goModules}},
		},
		{
			name: "escra-dkms", arch: "all",
			desc: "Escra kernel module source for DKMS\n" +
				" escra.ko carries per-period CFS telemetry and blocking OOM requests\n" +
				" from a kernel patched with the Escra hooks to escrad over generic\n" +
				" netlink. On other kernels it builds as a stub that does not load.",
			depends:   []string{"dkms"},
			contents:  dkmsFiles,
			license:   licKernel,
			copyright: []copyrightStanza{{files: "*", license: licKernel}},
			scripts:   dkmsScripts,
		},
	}
	var out []string
	for _, pk := range pkgs {
		cr := filepath.Join(tmp, pk.name+".copyright")
		if err := os.WriteFile(cr, []byte(copyrightFile(pk.name, pk.copyright)), 0o644); err != nil {
			return nil, err
		}
		pk.contents = append(pk.contents, file(cr, "/usr/share/doc/"+pk.name+"/copyright", 0o644))
		path, err := writeDeb(o.Out, ver, pk)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pk.name, err)
		}
		out = append(out, path)
	}
	return out, nil
}

func writeDeb(outDir, ver string, pk pkg) (string, error) {
	info := nfpm.WithDefaults(&nfpm.Info{
		Name: pk.name, Arch: pk.arch, Platform: "linux",
		Version: ver, VersionSchema: "none",
		Section: "admin", Priority: "optional",
		Maintainer: maintainer, Description: pk.desc,
		Homepage: "https://github.com/escra-dev/escra", License: pk.license,
		Overridables: nfpm.Overridables{
			Depends: pk.depends, Recommends: pk.recommends,
			Contents: pk.contents, Scripts: pk.scripts,
		},
	})
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	packager, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	path := filepath.Join(outDir, packager.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}
