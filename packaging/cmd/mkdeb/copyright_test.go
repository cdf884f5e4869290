package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebsCarryCopyright builds the three packages (the binaries are
// placeholders: nothing here runs them) and reads each one's
// /usr/share/doc/PKG/copyright back out of the .deb: a DEP-5 file whose
// every Files paragraph names a license with its own License paragraph,
// the licenses of what the package holds. escra-controller also
// ships the dashboard and the alert rules.
func TestDebsCarryCopyright(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb missing")
	}
	bin := t.TempDir()
	for _, b := range []string{"escrad", "escra-controller", "escractl", "escra-gateway"} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	debs, err := build(options{Version: "0.3.0~2.g1a2b3c4", Bin: bin, Root: "../../..", Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	wantLicenses := map[string][]string{
		"escrad":           {"Apache-2.0", "GPL-2.0"},
		"escra-controller": {"Apache-2.0"},
		"escra-gateway":    {"Apache-2.0"},
		"escra-dkms":       {"GPL-2.0"},
	}
	for _, d := range debs {
		name := strings.TrimSpace(sh(t, "dpkg-deb", "-f", d, "Package"))
		x := t.TempDir()
		sh(t, "dpkg-deb", "-x", d, x)
		b, err := os.ReadFile(filepath.Join(x, "usr/share/doc", name, "copyright"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		used, defined := checkDEP5(t, name, string(b))
		for _, l := range wantLicenses[name] {
			if !used[l] {
				t.Errorf("%s: copyright names no files under %s:\n%s", name, l, b)
			}
		}
		for l := range used {
			if !defined[l] {
				t.Errorf("%s: license %s has no License paragraph", name, l)
			}
		}
		if len(used) != len(wantLicenses[name]) {
			t.Errorf("%s: copyright uses %v, want %v", name, used, wantLicenses[name])
		}
		if name == "escra-controller" {
			for _, f := range []string{"usr/share/escra/grafana/escra-dashboard.json", "usr/share/escra/prometheus/escra-alerts.yml"} {
				if _, err := os.Stat(filepath.Join(x, f)); err != nil {
					t.Errorf("escra-controller: %v", err)
				}
			}
		}
	}
}

// checkDEP5 parses a machine-readable copyright file into paragraphs and
// checks the fields each kind must have; it returns the licenses Files
// paragraphs use and those with a standalone License paragraph (a body).
func checkDEP5(t *testing.T, pkg, s string) (used, defined map[string]bool) {
	t.Helper()
	used, defined = map[string]bool{}, map[string]bool{}
	paras := strings.Split(strings.TrimSpace(s), "\n\n")
	for i, p := range paras {
		fields := map[string]string{}
		key := ""
		for _, line := range strings.Split(p, "\n") {
			if strings.HasPrefix(line, " ") {
				if key == "" {
					t.Errorf("%s: paragraph %d starts with a continuation line", pkg, i)
				}
				fields[key] += "\n" + line
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				t.Errorf("%s: paragraph %d: %q is not a field", pkg, i, line)
				continue
			}
			key = k
			fields[k] = strings.TrimSpace(v)
		}
		switch {
		case i == 0:
			if fields["Format"] != "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" {
				t.Errorf("%s: header Format %q", pkg, fields["Format"])
			}
		case fields["Files"] != "":
			if fields["Copyright"] == "" || fields["License"] == "" {
				t.Errorf("%s: Files %s lacks Copyright or License", pkg, fields["Files"])
			}
			used[strings.SplitN(fields["License"], "\n", 2)[0]] = true
		case fields["License"] != "":
			l, body, _ := strings.Cut(fields["License"], "\n")
			if !strings.Contains(body, "/usr/share/common-licenses/") {
				t.Errorf("%s: License %s paragraph does not point at the full text", pkg, l)
			}
			defined[l] = true
		default:
			t.Errorf("%s: paragraph %d is neither Files nor License:\n%s", pkg, i, p)
		}
	}
	return used, defined
}
