package scripts_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Docs and comments speak in the product's words: papers by title and
// section ("Escra §IV-B", "PEMA Eq. 5"), never the project's own numbering
// of them or of its work items, and no pointers out of the repository.
// CHANGELOG.md alone tells history.
var historyWords = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bseeds? 00[0-4]\b`),
	regexp.MustCompile(`(?i)\bseeds/`),
	regexp.MustCompile(`(?i)\bissues? #?[0-9]`),
	regexp.MustCompile(`(?i)\bround [0-9]`),
	regexp.MustCompile(`https?://(github|gitlab)\.com/[^\s)>]*/(issues|pull|merge_requests)/`),
}

// Hosts a doc may link to: paper DOIs and the upstream documentation of
// what Escra builds on.
var docHosts = map[string]bool{
	"doi.org": true, "dl.acm.org": true, "www.debian.org": true, "docs.docker.com": true,
	"prometheus.io": true, "grafana.com": true, "docs.kernel.org": true, "www.kernel.org": true,
	"pkg.go.dev": true, "www.freedesktop.org": true, "systemd.io": true,
}

var (
	urlRE     = regexp.MustCompile(`https?://[^\s)>\]` + "`" + `"']+`)
	relPathRE = regexp.MustCompile(`(?:^|[\s("'` + "`" + `\[])((?:\.\./)+[A-Za-z0-9_.*-][A-Za-z0-9_.*/-]*)`)
	hostRE    = regexp.MustCompile(`^https?://\[?([^/:\]]*)`)
	absPathRE = regexp.MustCompile(`(?:^|[\s("'` + "`" + `])/work/`)
)

// wordProblems returns what file (its path in the repository) says that
// the rules above forbid, one line each. exists says whether a path (a
// glob) names something in the repository.
func wordProblems(file, text string, exists func(string) bool) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		at := func(what string) { out = append(out, fmt.Sprintf("%s:%d: %s", file, i+1, what)) }
		for _, re := range historyWords {
			if m := re.FindString(line); m != "" {
				at("project history " + strconv.Quote(m) + ": cite the paper by title and section")
			}
		}
		for _, m := range relPathRE.FindAllStringSubmatch(line, -1) {
			p := path.Join(path.Dir(file), m[1])
			if p == ".." || strings.HasPrefix(p, "../") {
				at("path " + strconv.Quote(m[1]) + " leaves the repository")
			} else if strings.HasSuffix(file, ".md") && !exists(p) { // Go code names build outputs and bad input too
				at("path " + strconv.Quote(m[1]) + " is not in the repository")
			}
		}
		if absPathRE.MatchString(line) {
			at("absolute path under /work/: not part of the repository")
		}
		if !strings.HasSuffix(file, ".md") {
			continue
		}
		for _, m := range urlRE.FindAllString(line, -1) {
			m = strings.TrimRight(m, ".,;:")
			host := hostRE.FindStringSubmatch(m)[1] // HOST:PORT is no URL to net/url
			if u, err := url.Parse(m); err == nil {
				host = u.Hostname()
			}
			if !localHost(host) && !docHosts[host] {
				at("link outside the repository " + strconv.Quote(m) + " (allowed: paper DOIs, upstream docs)")
			}
		}
	}
	return out
}

// localHost: loopback and private addresses, example domains and
// placeholders (HOST, escra-controller): addresses in commands, not links.
func localHost(h string) bool {
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified()
	}
	return h == "localhost" || !strings.Contains(h, ".") ||
		h == "example.com" || h == "example.org" || h == "example.net" || strings.HasSuffix(h, ".example")
}

// inRepo: the path, relative to the repository root, matches a file or
// directory there.
func inRepo(p string) bool {
	m, _ := filepath.Glob(filepath.Join("..", p))
	return len(m) > 0
}

func TestProductWords(t *testing.T) {
	for _, f := range trackedFiles(t, "*.go", "*.md") {
		// CHANGELOG.md tells history; this file spells out what it forbids.
		if f == "CHANGELOG.md" || f == "scripts/words_test.go" {
			continue
		}
		b, err := os.ReadFile("../" + f)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		for _, p := range wordProblems(f, string(b), inRepo) {
			t.Error(p)
		}
	}
}

// The rules themselves: each forbidden form is caught, the product's own
// words are not.
func TestWordRules(t *testing.T) {
	bad := map[string]string{
		"docs/a.md":        "as seed " + "000 §IV-B says",
		"docs/b.md":        "fixed in issue " + "40",
		"docs/c.md":        "see round 3",
		"docs/d.md":        "the paper (`../shared/seeds/004_*.txt`)",
		"docs/e.md":        "see https://github.com/escra-dev/escra/issues/12",
		"docs/f.md":        "[blog](https://blog.example.net/escra)",
		"docs/h.md":        "see https://203.0.113.9/escra",
		"daemon/x/y.go":    "// read /work/shared/BRIEF.md",
		"daemon/x/z.go":    `os.ReadFile("../../../outside.txt")`,
		"controller/a.go":  "// https://github.com/x/y/pull/3",
		"internal/b/b.go":  "// Issue #7",
		"docs/sub/deep.md": "[up](../../../x.md)",
		"docs/g.md":        "the paper (`../papers/004.txt`)",
	}
	exists := func(p string) bool {
		return p == "kmod/escra.c" || p == "packaging/grafana/escra-dashboard.json"
	}
	for f, s := range bad {
		if len(wordProblems(f, s, exists)) == 0 {
			t.Errorf("%s: %q passed", f, s)
		}
	}
	good := map[string]string{
		"docs/a.md":       "Escra §IV-B; the Mu paper §3.3; wavering around 1 core; seed 7",
		"docs/b.md":       "curl https://127.0.0.1:7472/metrics and http://HOST:PORT, https://10." + "0.0.1:7472, https://doi.org/10.1145/x",
		"docs/c.md":       "[the spec](spec.md), [kernel](../kmod/escra.c)",
		"daemon/x/y.go":   `os.ReadFile("../../packaging/grafana/escra-dashboard.json") // https://www.w3.org/2000/svg`,
		"controller/a.go": "// escractl certs issues the certificates",
	}
	for f, s := range good {
		if p := wordProblems(f, s, exists); len(p) > 0 {
			t.Errorf("%s: %q flagged: %v", f, s, p)
		}
	}
}
