package workloadimages

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Spec describes one image: how to fill its root filesystem and the
// Dockerfile-style changes (ENTRYPOINT, CMD, ...) to apply on import.
type Spec struct {
	Name    string // image repository, e.g. escra-bench/nginx
	Fill    func(repoRoot string, r *Rootfs) error
	Changes []string
}

// Images of the benchmark. Every container runs with --network host and
// gets its listen address from its command line.
var (
	DemoHTTP = Spec{
		Name:    "escra-bench/demo-http",
		Fill:    goFill("workloads/demo-http", "/demo-http"),
		Changes: []string{`ENTRYPOINT ["/demo-http"]`, `CMD ["-listen", "127.0.0.1:8080"]`},
	}
	Memwave = Spec{
		Name:    "escra-bench/memwave",
		Fill:    goFill("workloads/memwave", "/memwave"),
		Changes: []string{`ENTRYPOINT ["/memwave"]`},
	}
	Nginx = Spec{
		Name:    "escra-bench/nginx",
		Fill:    fillNginx,
		Changes: []string{`ENTRYPOINT ["/nginxentry"]`, `CMD ["-listen", "127.0.0.1:8081"]`},
	}
	Redis = Spec{
		Name: "escra-bench/redis",
		Fill: fillRedis,
		Changes: []string{
			`ENTRYPOINT ["/usr/bin/redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", "/tmp"]`,
			`CMD ["--port", "6380"]`},
	}
	// Spin is the best-effort batch container co-located with the app.
	Spin = Spec{
		Name:    "escra-bench/spin",
		Fill:    goFill("workloads/spin", "/spin"),
		Changes: []string{`ENTRYPOINT ["/spin"]`},
	}
	All = []Spec{DemoHTTP, Memwave, Nginx, Redis, Spin}
)

// Text files nginx serves, gzipped at level 9 on every request.
var NginxFiles = map[string]int{"/srv/www/64k.txt": 64 << 10, "/srv/www/1m.txt": 1 << 20, "/srv/www/4m.txt": 4 << 20}

func goFill(pkg, dst string) func(string, *Rootfs) error {
	return func(repoRoot string, r *Rootfs) error {
		b, err := GoBinary(repoRoot, pkg)
		if err != nil {
			return err
		}
		r.File(dst, 0o755, b)
		r.Dir("/tmp", 0o1777)
		return nil
	}
}

func minimalEtc(r *Rootfs) {
	r.File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n"))
	r.File("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	r.File("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files\n"))
	r.File("/etc/hosts", 0o644, []byte("127.0.0.1 localhost\n"))
	r.Dir("/tmp", 0o1777)
}

func fillNginx(repoRoot string, r *Rootfs) error {
	if err := r.HostBinary("/usr/sbin/nginx"); err != nil {
		return fmt.Errorf("nginx (Debian nginx-light, installed by scripts/setup.sh): %w", err)
	}
	entry, err := GoBinary(repoRoot, "internal/workloadimages/nginxentry")
	if err != nil {
		return err
	}
	r.File("/nginxentry", 0o755, entry)
	minimalEtc(r)
	r.Dir("/var/log/nginx", 0o755) // opened before -e takes effect on some builds
	r.Dir("/var/lib/nginx", 0o755)
	for p, n := range NginxFiles {
		r.File(p, 0o644, CompressibleText(n, int64(n)))
	}
	return nil
}

func fillRedis(_ string, r *Rootfs) error {
	if err := r.HostBinary("/usr/bin/redis-server"); err != nil {
		return fmt.Errorf("redis-server (Debian redis-server, installed by scripts/setup.sh): %w", err)
	}
	minimalEtc(r)
	return nil
}

// CompressibleText returns n bytes of word-salad English: gzip shrinks it
// a lot, but only by working hard for it at level 9.
func CompressibleText(n int, seed int64) []byte {
	words := strings.Fields(`the a of container limit memory cpu period quota slack throttle
		kernel cgroup allocator controller daemon request latency throughput burst trace
		distributed pool reclaim budget host engine docker image layer workload benchmark`)
	rng := rand.New(rand.NewSource(seed))
	var b bytes.Buffer
	b.Grow(n)
	col := 0
	for b.Len() < n {
		w := words[rng.Intn(len(words))]
		b.WriteString(w)
		col += len(w) + 1
		if col > 72 {
			b.WriteByte('\n')
			col = 0
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

// Builder builds images into one engine.
type Builder struct {
	Docker   *client.Client
	RepoRoot string
	Log      func(string)
}

// Build makes spec's image if no image with the same content exists and
// returns its tag, "<name>:<12 hex of sha256(rootfs tar + changes)>"; it
// also tags it "<name>:latest".
func (b *Builder) Build(ctx context.Context, spec Spec) (string, error) {
	r := NewRootfs()
	if err := spec.Fill(b.RepoRoot, r); err != nil {
		return "", fmt.Errorf("image %s: %w", spec.Name, err)
	}
	tarball, err := r.Tar()
	if err != nil {
		return "", fmt.Errorf("image %s: tar: %w", spec.Name, err)
	}
	h := sha256.New()
	h.Write(tarball)
	for _, c := range spec.Changes {
		h.Write([]byte("\x00" + c))
	}
	tag := spec.Name + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	if _, err := b.Docker.ImageInspect(ctx, tag); err == nil {
		return tag, b.tagLatest(ctx, tag, spec.Name)
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("image %s: inspect: %w", tag, err)
	}
	if b.Log != nil {
		b.Log(fmt.Sprintf("importing %s (%d MiB rootfs)", tag, len(tarball)>>20))
	}
	rc, err := b.Docker.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(tarball), SourceName: "-"},
		tag, client.ImageImportOptions{Changes: append([]string{`LABEL escra.bench=1`}, spec.Changes...)})
	if err != nil {
		return "", fmt.Errorf("image %s: import: %w", tag, err)
	}
	defer rc.Close()
	// The engine streams JSON progress; an error arrives in-band.
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("image %s: import: %w", tag, err)
		}
		if m.Error != "" {
			return "", fmt.Errorf("image %s: import: %s", tag, m.Error)
		}
	}
	return tag, b.tagLatest(ctx, tag, spec.Name)
}

func (b *Builder) tagLatest(ctx context.Context, tag, name string) error {
	_, err := b.Docker.ImageTag(ctx, client.ImageTagOptions{Source: tag, Target: name + ":latest"})
	return err
}

// BuildAll builds every benchmark image and returns name → tag.
func (b *Builder) BuildAll(ctx context.Context) (map[string]string, error) {
	tags := map[string]string{}
	for _, s := range All {
		t, err := b.Build(ctx, s)
		if err != nil {
			return nil, err
		}
		tags[s.Name] = t
	}
	return tags, nil
}
