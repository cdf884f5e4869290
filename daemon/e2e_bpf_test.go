package daemon_test

// The BPF backend: escrad --backend bpf on this machine's own kernel (stock, with
// BTF), the real engine and a labelled container: the binary, not the
// agent in-process, so the flag and the fallback are what a user runs.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source/bpf"
	"github.com/escra-dev/escra/daemon/source/bpf/bpftest"
	"github.com/escra-dev/escra/internal/dockertest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

var escradBuild struct {
	sync.Mutex
	path string
}

// escradBinary builds escrad once per test binary, into a directory that
// any user may read (the unprivileged test runs it as nobody); the same
// directory every run of this checkout, so nothing piles up, and another
// checkout's (built with or without its BPF object) does not replace it.
func escradBinary(t *testing.T) string {
	t.Helper()
	escradBuild.Lock()
	defer escradBuild.Unlock()
	if escradBuild.path != "" {
		return escradBuild.path
	}
	root := sha256.Sum256([]byte(dockertest.RepoRoot()))
	dir := filepath.Join(os.TempDir(), "escra-bpf-e2e-"+hex.EncodeToString(root[:4]))
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = dockertest.BuildBinaries(dir, "./daemon/cmd/escrad")
	}
	if err != nil {
		t.Fatal(err)
	}
	escradBuild.path = filepath.Join(dir, "escrad")
	return escradBuild.path
}

// startEscrad runs the escrad binary against the main engine and the
// controller at ctl, managing only app, until the test ends.
func startEscrad(t *testing.T, bin, ctl, app string, args ...string) *bytes.Buffer {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--insecure", "--controller", ctl, "--apps", app,
		"--docker-host", "unix://" + dockertest.Socket, "--host-id", "bpf-e2e",
		// Other escrads may run on the same engine (other tests): their
		// own lock and OOM state files.
		"--lock-dir", dir, "--oom-state", filepath.Join(dir, "oom-armed"), "--log-level", "debug"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("escrad output:\n%s", out.String())
		}
	})
	return &out
}

func TestEscradBPFBackendDeliversTelemetryOnHostKernel(t *testing.T) {
	bpftest.NeedObject(t, bpf.Built())
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(bpf.BTFPath); err != nil {
		t.Skip("kernel without BTF: the bpf backend cannot run here")
	}
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	bin := escradBinary(t)
	p := startPeer(t)
	app := appLabel(t)[containers.AppLabel]
	startEscrad(t, bin, p.Addr(), app, "--backend", "bpf")
	deadline := time.Now().Add(20 * time.Second)
	for p.Sessions() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p.Sessions() == 0 {
		t.Fatal("escrad --backend bpf never connected")
	}
	if b := pb.Backend(p.Backend.Load()); b != pb.Backend_BACKEND_BPF {
		t.Fatalf("escrad reports backend %v, want BACKEND_BPF", b)
	}
	// Busy under its quota, so every period has a record.
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("bpf-e2e"), Image: img, Cmd: []string{"-for", "60s"},
		Labels: appLabel(t), Resources: container.Resources{CPUQuota: 30000, CPUPeriod: 100000}})
	started := time.Now() // docker start returned
	reg := p.WaitRegistered(id, 10*time.Second)
	if reg == nil {
		t.Fatal("labelled container not registered")
	}
	deadline = time.Now().Add(10 * time.Second)
	// The first to arrive may be a throttle event (mid_period): the
	// container is busy under its quota. Wait for a period record.
	record := func() *pb.CpuStat {
		if s := p.LastCPU(reg.Handle); s != nil && !s.MidPeriod {
			return s
		}
		return nil
	}
	for record() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s := record()
	if s == nil {
		t.Fatalf("no period record for the labelled container from the bpf backend (last: %v)", p.LastCPU(reg.Handle))
	}
	// Delivery is asserted, not its speed (shared host); for the record:
	t.Logf("first record %v after docker start returned", time.Since(started).Round(time.Millisecond))
	if s.QuotaUs != 30000 || s.PeriodUs != 100000 {
		t.Errorf("record %v, want quota 30000 us, period 100000 us", s)
	}
}

// Without the privilege to load tracing programs, --backend bpf fails with
// one clear line, and auto falls back to cgroupfs.
func TestEscradBPFBackendUnprivileged(t *testing.T) {
	bpftest.NeedObject(t, bpf.Built())
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop privileges")
	}
	bin := escradBinary(t)
	// nobody: no CAP_BPF or CAP_PERFMON.
	lockDir, err := os.MkdirTemp(filepath.Dir(bin), "lock-")
	if err == nil {
		err = os.Chmod(lockDir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(lockDir) })
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	run := func(backend string) (string, error) { return runBackendChoice(bin, lockDir, backend, nobody) }
	out, err := run("bpf")
	if err == nil || !strings.Contains(out, "bpf backend:") {
		t.Fatalf("--backend bpf as nobody: err %v, output %q; want a 'bpf backend:' error", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "escrad: bpf backend: not permitted") || strings.Count(out, "bpf backend") != 1 {
		t.Errorf("want one line 'escrad: bpf backend: not permitted ...' at the end, got %q", out)
	}
	out, _ = run("auto")
	if !strings.Contains(out, "bpf backend unavailable; using cgroupfs") || !strings.Contains(out, "backend=cgroupfs") {
		t.Errorf("--backend auto as nobody: %q; want the bpf error logged and cgroupfs chosen", out)
	}
}

// runBackendChoice runs the escrad binary bin with --backend backend (as
// cred, nil: this user) for at most 3 s and returns its output: with
// --no-docker and an empty config only the backend choice runs before the
// controller dial.
func runBackendChoice(bin, lockDir, backend string, cred *syscall.Credential) (string, error) {
	cmd := exec.Command(bin, "--insecure", "--controller", "127.0.0.1:1", "--no-docker", "--no-oom-guard",
		"--lock-dir", lockDir, "--oom-state", filepath.Join(lockDir, "oom-armed"), "--backend", backend)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return string(out), err
}

// An escrad built without the BPF object (a bare go build where clang is
// missing; make build compiles it): --backend bpf fails with one line
// saying how to build it, and auto falls back to cgroupfs, as on a kernel
// without BTF.
func TestEscradBuiltWithoutBPFObject(t *testing.T) {
	dir := t.TempDir()
	// go build's overlay deletes the object from the build's view.
	obj := filepath.Join(dockertest.RepoRoot(), "daemon", "source", "bpf", bpf.ObjectFile)
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {obj: ""}})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "escrad")
	cmd := exec.Command("go", "build", "-trimpath", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "./daemon/cmd/escrad")
	cmd.Dir = dockertest.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build escrad without the object: %v\n%s", err, out)
	}
	out, err := runBackendChoice(bin, dir, "bpf", nil)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || lines[len(lines)-1] != "escrad: "+bpf.ErrNotBuilt.Error() || strings.Count(out, "bpf backend") != 1 {
		t.Errorf("--backend bpf without the object: err %v, output %q; want one last line %q", err, out, "escrad: "+bpf.ErrNotBuilt.Error())
	}
	out, _ = runBackendChoice(bin, dir, "auto", nil)
	if !strings.Contains(out, "bpf backend unavailable; using cgroupfs") || !strings.Contains(out, "object not built") ||
		!strings.Contains(out, "backend=cgroupfs") {
		t.Errorf("--backend auto without the object: %q; want the bpf error logged and cgroupfs chosen", out)
	}
}

// The bpf backend traps OOMs the stock-kernel way: a memhog past its
// limit is granted memory and finishes, with its telemetry from BPF.
func TestBPFBackendOOMGrantedContainerFinishes(t *testing.T) {
	bpftest.NeedObject(t, bpf.Built())
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(bpf.BTFPath); err != nil {
		t.Skip("kernel without BTF: the bpf backend cannot run here")
	}
	p := startPeer(t)
	p.OnOOM = func(r *pb.OomRequest) *pb.OomVerdict {
		return &pb.OomVerdict{Handle: r.Handle, Granted: true, NewLimitBytes: int64(r.LimitBytes) + 64<<20}
	}
	code, kills, _, a := oomCaseAgent(t, p.Addr(), func(c *agent.Config) {
		c.Backend, c.BPFSource = agent.BackendBPF, bpf.NewSource
	})
	if a.Backend() != agent.BackendBPF {
		t.Fatalf("agent runs %s, want bpf", a.Backend())
	}
	if code != 0 || kills != 0 {
		t.Fatalf("exit %d, oom_kill %d; want 0 and 0", code, kills)
	}
	if p.OOMRequests() == 0 {
		t.Fatal("no OOM request reached the controller: the test proved nothing")
	}
}

// As root on a kernel with BTF, escrad's default (auto) does not settle
// for cgroupfs: kernel when escra.ko is loaded, else bpf.
func TestEscradAutoPrefersBPFOverCgroupfs(t *testing.T) {
	bpftest.NeedObject(t, bpf.Built())
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(bpf.BTFPath); err != nil {
		t.Skip("kernel without BTF: the bpf backend cannot run here")
	}
	dockertest.Client(t, "") // skips without an engine
	bin := escradBinary(t)
	p := startPeer(t)
	startEscrad(t, bin, p.Addr(), appLabel(t)[containers.AppLabel])
	deadline := time.Now().Add(20 * time.Second)
	for p.Sessions() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p.Sessions() == 0 {
		t.Fatal("escrad never connected")
	}
	if b := pb.Backend(p.Backend.Load()); b != pb.Backend_BACKEND_BPF && b != pb.Backend_BACKEND_KERNEL {
		t.Fatalf("escrad --backend auto chose %v, want BACKEND_KERNEL or BACKEND_BPF", b)
	}
}
