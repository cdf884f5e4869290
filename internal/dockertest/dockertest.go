// Package dockertest helps tests use the real Docker engine: it builds tiny
// local images (docker import of a tar of static Go binaries; nothing is
// pulled) and runs labelled containers that are removed when the test ends.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Socket is the main engine's socket.
const Socket = "/var/run/docker.sock"

// TestLabel marks every container this package starts.
const TestLabel = "escra.test"

// Client returns a client for host ("" = the main engine) or skips the test
// when the main engine's socket is absent.
func Client(t testing.TB, host string) *client.Client {
	t.Helper()
	if host == "" {
		if _, err := os.Stat(Socket); err != nil {
			t.Skip("docker socket " + Socket + " absent: run `make setup` (starts dockerd) to run this test")
		}
		host = "unix://" + Socket
	}
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// RepoRoot is the module root (found from this file's location).
func RepoRoot() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(f), "..", ".."))
}

var buildMu sync.Mutex

// BuildBinaries builds static binaries of the given packages (import paths
// relative to the module root, e.g. "./workloads/memhog") into dir.
func BuildBinaries(dir string, pkgs ...string) error {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, p := range pkgs {
		out := filepath.Join(dir, filepath.Base(p))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, p)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", p, err, b)
		}
	}
	return nil
}

// WorkloadImage returns a local image holding /bin/memhog and /bin/spin,
// building and importing it into the engine of cli when missing. The tag is
// a hash of the binaries, so a changed workload makes a new image.
func WorkloadImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	imgMu.Lock()
	defer imgMu.Unlock()
	// Cached per host, but looked up again: a test's own engine started
	// afresh on the same socket (go test -count=N) has an empty store.
	if ref, ok := imgs[cli.DaemonHost()]; ok {
		if _, err := cli.ImageInspect(context.Background(), ref); err == nil {
			return ref
		}
	}
	ref, err := ImportWorkloads(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	imgs[cli.DaemonHost()] = ref
	return ref
}

var (
	imgMu sync.Mutex
	imgs  = map[string]string{} // engine host -> image, per process
)

// ImportWorkloads is WorkloadImage without a testing.TB (benchmarks).
func ImportWorkloads(ctx context.Context, cli *client.Client) (string, error) {
	b, sum, err := workloadsTarHash()
	if err != nil {
		return "", err
	}
	buf := bytes.NewBuffer(b)
	ref := "escra-test/workloads:" + sum[:16]
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: buf, SourceName: "-"}, ref, client.ImageImportOptions{
		Changes: []string{`ENTRYPOINT ["/bin/spin"]`, `LABEL org.escra.test=1`},
	})
	if err != nil {
		return "", fmt.Errorf("docker import: %w", err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("imported image %s not found: %w", ref, err)
	}
	return ref, nil
}

// Spec describes a test container.
type Spec struct {
	Name       string
	Image      string
	Cmd        []string // entrypoint is /bin/spin; use {"/bin/memhog", ...} with Entrypoint
	Entrypoint []string
	Labels     map[string]string
	Resources  container.Resources
	OomKillOff bool
	// CgroupParent puts the container under this cgroup ("/x": below the
	// hierarchy root).
	CgroupParent string
	// Binds are docker run -v mounts ("SRC:DST[:ro]").
	Binds []string
}

// Run creates and starts a container (network none) and removes it when
// the test ends. It returns the container id.
func Run(t testing.TB, cli *client.Client, s Spec) string {
	t.Helper()
	id, err := Start(context.Background(), cli, s)
	if id != "" {
		t.Cleanup(func() { Remove(cli, id) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Start is Run without a testing.TB; the caller removes the container.
func Start(ctx context.Context, cli *client.Client, s Spec) (string, error) {
	labels := map[string]string{TestLabel: "1"}
	for k, v := range s.Labels {
		labels[k] = v
	}
	hc := &container.HostConfig{NetworkMode: "none", Resources: s.Resources}
	hc.CgroupParent = s.CgroupParent
	hc.Binds = s.Binds
	if s.OomKillOff {
		t := true
		hc.OomKillDisable = &t
	}
	cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{
		Image: s.Image, Cmd: s.Cmd, Entrypoint: s.Entrypoint, Labels: labels,
	}, HostConfig: hc, Name: s.Name})
	if err != nil {
		return "", fmt.Errorf("docker create %s: %w", s.Name, err)
	}
	if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return cr.ID, fmt.Errorf("docker start %s: %w", s.Name, err)
	}
	return cr.ID, nil
}

// Remove force-removes a container, ignoring errors (already gone).
func Remove(cli *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
}

// RemoveAllTest removes every container carrying TestLabel (left over from
// a killed run).
func RemoveAllTest(cli *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", TestLabel)})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		Remove(cli, c.ID)
	}
}

// Wait waits for a container to exit and returns its exit code and whether
// the kernel OOM-killed it.
func Wait(ctx context.Context, cli *client.Client, id string) (code int, oomKilled bool, err error) {
	w := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		return 0, false, err
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	j, err := Inspect(ctx, cli, id)
	if err != nil {
		return 0, false, err
	}
	return j.State.ExitCode, j.State.OOMKilled, nil
}

// Inspect is ContainerInspect's container alone, as tests read it.
func Inspect(ctx context.Context, cli *client.Client, id string) (container.InspectResponse, error) {
	r, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return r.Container, err
}

// UniqueName returns a container name unique to this test run.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(prefix, "/", "-"), os.Getpid(), time.Now().UnixNano()%1e9)
}

// workloadsTar builds the workloads' binaries into a root filesystem tar;
// sum is a hash of the binaries.
func workloadsTar() ([]byte, error) {
	b, _, err := workloadsTarHash()
	return b, err
}

func workloadsTarHash() ([]byte, string, error) {
	dir, err := os.MkdirTemp("", "escra-img-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	if err := BuildBinaries(dir, "./workloads/memhog", "./workloads/spin"); err != nil {
		return nil, "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := sha256.New()
	names := []string{"memhog", "spin"}
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, "", err
		}
		h.Write(b)
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + n, Mode: 0o755, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, "", err
		}
		tw.Write(b)
	}
	// An empty /tmp keeps Go programs happy.
	tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0)})
	tw.Close()
	return buf.Bytes(), hex.EncodeToString(h.Sum(nil)), nil
}

// HogReady is what memhog prints once its SIGUSR1 handler is installed.
const HogReady = "memhog: waiting for SIGUSR1"

// StartHog sends SIGUSR1 to a memhog started with -wait-usr1 once it has
// printed HogReady. Sent earlier, the signal is caught by the Go runtime
// with no handler yet and dropped, and the hog waits for ever: on a busy
// machine the container can be managed (and armed) by escrad before the
// process inside has reached signal.Notify.
func StartHog(ctx context.Context, cli *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true})
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if bytes.Contains(b, []byte(HogReady)) {
				_, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "USR1"})
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("memhog %s never printed %q: %w", short(id), HogReady, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
