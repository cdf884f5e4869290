// Package workloadimages builds the container images of the workloads the
// benchmarks, the e2e tests and the demo run, locally, without a registry
// (house rule): a root filesystem assembled in memory — static Go
// binaries, or Debian programs copied with their shared-library closure —
// is tarred deterministically and `docker import`ed. The tag is the content
// hash, so building again is a no-op.
package workloadimages

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

type entry struct {
	mode int64
	data []byte
	dir  bool
	link string // symlink target
}

// Rootfs is a root filesystem under construction.
type Rootfs struct{ files map[string]entry }

func NewRootfs() *Rootfs { return &Rootfs{files: map[string]entry{}} }

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// Dir adds a directory (and its parents).
func (r *Rootfs) Dir(p string, mode int64) {
	p = clean(p)
	for q := p; q != "." && q != ""; q = path.Dir(q) {
		if _, ok := r.files[q]; !ok {
			m := int64(0o755)
			if q == p {
				m = mode
			}
			r.files[q] = entry{mode: m, dir: true}
		}
	}
}

// File adds a regular file with its parent directories.
func (r *Rootfs) File(p string, mode int64, data []byte) {
	p = clean(p)
	r.Dir(path.Dir(p), 0o755)
	r.files[p] = entry{mode: mode, data: data}
}

// Symlink adds a symbolic link p → target.
func (r *Rootfs) Symlink(p, target string) {
	p = clean(p)
	r.Dir(path.Dir(p), 0o755)
	r.files[p] = entry{mode: 0o777, link: target}
}

// HostFile copies a host file (following symlinks) to dst.
func (r *Rootfs) HostFile(dst, src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	r.File(dst, int64(st.Mode().Perm()), data)
	return nil
}

// HostBinary copies a dynamically linked host program to the same path,
// with every library `ldd` lists (and the dynamic loader) at the paths the
// loader will look for them.
func (r *Rootfs) HostBinary(bin string) error {
	if err := r.HostFile(bin, bin); err != nil {
		return err
	}
	libs, err := LddClosure(bin)
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := r.HostFile(l, l); err != nil {
			return err
		}
	}
	// Debian's loader path is /lib64/ld-linux-x86-64.so.2 → /lib/x86_64-linux-gnu/...;
	// with merged /usr, /lib is a link to usr/lib on the host; the copies
	// above land at the paths ldd printed, which the loader uses as is.
	return nil
}

// LddClosure lists the absolute paths of the shared objects bin needs.
func LddClosure(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return parseLdd(string(out))
}

// parseLdd reads lines like
//
//	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)
//	/lib64/ld-linux-x86-64.so.2 (0x...)
//	linux-vdso.so.1 (0x...)
func parseLdd(out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>":
			if f[2] == "not" {
				return nil, fmt.Errorf("ldd: %s not found", f[0])
			}
			if strings.HasPrefix(f[2], "/") {
				libs = append(libs, f[2])
			}
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd printed no libraries (static binary?)")
	}
	return libs, nil
}

// Tar writes the tree in sorted order with fixed owners and times, so the
// same tree gives the same bytes (and the same image tag).
func (r *Rootfs) Tar() ([]byte, error) {
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		e := r.files[n]
		h := &tar.Header{Name: n, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// GoBinary builds a static Go binary of pkg (relative to the module root)
// and returns its bytes.
func GoBinary(repoRoot, pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "escra-img-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bin")
	goBin := "go"
	if _, err := exec.LookPath(goBin); err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, "./"+pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v: %s", pkg, err, strings.TrimSpace(string(b)))
	}
	return os.ReadFile(out)
}

// RepoRoot finds the module root (the directory holding go.mod) from dir upwards.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		d = p
	}
}
