// Command bench-faults is make bench-faults: the trust and durability
// fault checks against the real binaries (bin/), a real etcd and real Docker engines (two private
// dockerd started by scripts/hosts.sh, one escrad per engine, labelled
// containers), on kernel-picked ports. It writes
// results/faults/summary.json (flat keys) and report.txt. Every process it
// starts is killed by pid; every container, namespace and engine it makes
// is removed, also on failure (and a rerun removes what a killed run left
// under the bench's names). A partition is nft DROP rules inside the
// network namespace the bench runs one escrad in (internal/netns), never
// in the host's own ruleset: the machine's firewall is shared.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/procstat"
)

var (
	bin      = flag.String("bin", "bin", "directory of escrad, escra-controller, escractl")
	out      = flag.String("out", "results/faults", "output directory")
	soakFor  = flag.Duration("soak", 0, "run the randomized fault schedule this long instead of the checks (make soak FAULTS=1)")
	soakSeed = flag.Uint64("seed", 0, "-soak: schedule seed (0: from the clock; printed)")
	steps    = flag.String("steps", "", "comma-separated steps to run (admin, duplicate, ha, deposed, partition, outage, rotate, scope, flood, store, v1); empty: all")
)

type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	seen chan string // lines matching a wanted pattern
	want *regexp.Regexp
	// onLine, when set before the output flows, sees every line.
	onLine func(string)
}

var (
	procsMu sync.Mutex
	procs   []*proc
	tmp     string
	summary = map[string]any{}
	report  []string
)

func say(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	fmt.Fprintln(os.Stderr, "faults:", line)
	report = append(report, line)
}

// start runs a binary; lines matching want are sent on p.seen.
func start(name string, want string, args ...string) (*proc, error) {
	return startWith(name, want, nil, args...)
}

func startWith(name string, want string, onLine func(string), args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), seen: make(chan string, 16), onLine: onLine}
	if want != "" {
		p.want = regexp.MustCompile(want)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			on := p.onLine
			p.mu.Unlock()
			if on != nil {
				on(sc.Text())
			}
			if p.want != nil && p.want.MatchString(sc.Text()) {
				select {
				case p.seen <- sc.Text():
				default:
				}
			}
		}
	}()
	go func() { p.cmd.Wait(); w.Close() }()
	return p, nil
}

func (p *proc) wait(d time.Duration) (string, error) {
	select {
	case l := <-p.seen:
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("%s: no %q line within %v", p.name, p.want, d)
	}
}

// tail is the last lines of the process's output, for an error.
func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := strings.Split(strings.TrimSpace(p.log.String()), "\n")
	return strings.Join(l[max(0, len(l)-3):], " | ")
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

func cleanup() {
	procsMu.Lock()
	for _, p := range procs {
		p.kill()
	}
	procsMu.Unlock()
	waitProcs()
	removeNS()
	removeContainers()
}

// waitProcs waits (briefly) for the killed processes to be gone, so a
// namespace is not kept alive by one and a lock is free for the next step.
func waitProcs() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		if p.cmd.Process == nil {
			continue
		}
		for i := 0; i < 100 && syscall.Kill(p.cmd.Process.Pid, 0) == nil && !zombie(p.cmd.Process.Pid); i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	st, err := procstat.Read(pid)
	return err != nil || st.Zombie()
}

var ready = regexp.MustCompile(`escra-controller ready.* sessions=(\S+) telemetry=(\S+) admin=(\S+)`)

type ctl struct {
	p                   *proc
	sessions, udp, admn string
}

func startController(name string, args ...string) (*ctl, error) {
	p, err := start(name, ready.String(), append([]string{filepath.Join(*bin, "escra-controller"), "--listen", "127.0.0.1:0",
		"--telemetry-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--reclaim-every", "0"}, args...)...)
	if err != nil {
		return nil, err
	}
	l, err := p.wait(15 * time.Second)
	if err != nil {
		return nil, err
	}
	m := ready.FindStringSubmatch(l)
	return &ctl{p: p, sessions: m[1], udp: m[2], admn: m[3]}, nil
}

// client trusts the Escra CA and presents role's certificate ("": none).
func client(certs, role string) (*http.Client, error) {
	pem, err := os.ReadFile(auth.CAPath(certs))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tc := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: auth.ControllerName}
	if role != "" {
		pair, err := tls.LoadX509KeyPair(auth.CertPath(certs, role), auth.KeyPath(certs, role))
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

func call(c *http.Client, method, url, body string) (int, []byte) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// --- A: admin API roles and the bolt store across SIGKILL -----------------

func adminAndRestart() error {
	certs := filepath.Join(tmp, "certs")
	if b, err := exec.Command(filepath.Join(*bin, "escractl"), "certs", "--dir", certs, "--hosts", "h1").CombinedOutput(); err != nil {
		return fmt.Errorf("escractl certs: %v: %s", err, b)
	}
	tlsArgs := []string{"--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "controller"), "--tls-key", auth.KeyPath(certs, "controller")}
	state := filepath.Join(tmp, "state")
	c, err := startController("controller-bolt", append(tlsArgs, "--state-dir", state)...)
	if err != nil {
		return err
	}
	base := "https://" + c.admn
	anon, err := client(certs, "")
	if err != nil {
		return err
	}
	hostc, err := client(certs, "h1")
	if err != nil {
		return err
	}
	admin, err := client(certs, "admin")
	if err != nil {
		return err
	}
	code, _ := call(anon, "DELETE", base+"/v1/apps/web", "")
	summary["admin_anonymous_status"] = code
	body := `{"name":"web","cpu_cores":2,"memory_bytes":1073741824,"sigma":0.5}`
	code, _ = call(hostc, "PUT", base+"/v1/apps/web", body)
	summary["admin_host_cert_put_status"] = code
	// What escractl apply sets: budget, σ and allocator parameters of a
	// spec (docs/examples/batch.yaml), budget only (no hosts here).
	if b, err := exec.Command(filepath.Join(*bin, "escractl"), "--controller", base, "--certs", certs,
		"apply", "-f", "docs/examples/batch.yaml", "--budget-only").CombinedOutput(); err != nil {
		return fmt.Errorf("escractl apply: %v: %s", err, b)
	}
	var before, apps []adminapi.App
	if code, b := call(admin, "GET", base+"/v1/apps", ""); code != 200 || json.Unmarshal(b, &before) != nil || len(before) != 1 {
		return fmt.Errorf("apps after escractl apply: %d %s", code, b)
	}
	c.p.kill()
	c.p.cmd.Process.Wait()
	t0 := time.Now()
	c2, err := startController("controller-bolt-2", append(tlsArgs, "--state-dir", state)...)
	if err != nil {
		return err
	}
	code, b := call(admin, "GET", "https://"+c2.admn+"/v1/apps", "")
	json.Unmarshal(b, &apps)
	kept := code == 200 && len(apps) == 1
	if kept {
		x, y := before[0], apps[0]
		kept = x.Name == "batch" && x.CPUCores == y.CPUCores && x.MemoryBytes == y.MemoryBytes && x.Sigma == y.Sigma &&
			x.Params == y.Params && x.Policy == y.Policy && !y.Auto && y.Params.Kappa == 0.6 && y.Params.Upsilon == 35
	}
	if !kept {
		say("restart: apps before %+v, after %+v", before, apps)
	}
	summary["restart_budget_kept"] = b2i(kept)
	summary["restart_ready_ms"] = time.Since(t0).Milliseconds()
	say("admin: anonymous DELETE %v, host certificate PUT %v; budget kept across SIGKILL: %v", summary["admin_anonymous_status"], summary["admin_host_cert_put_status"], kept)
	c2.p.kill()
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// --- B: one escrad per engine ---------------------------------------------

func duplicateEscrad() error {
	dir := filepath.Join(tmp, "dup")
	os.MkdirAll(dir, 0o700)
	e := engines[0]
	args := []string{filepath.Join(*bin, "escrad"), "--docker-host", e.host, "--insecure", "--controller", "127.0.0.1:1", "--host-id", "faults-dup",
		"--no-oom-guard", "--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir, "--backend", "cgroupfs"}
	first, err := start("escrad-dup", "escrad starting", args...)
	if err != nil {
		return err
	}
	if _, err := first.wait(20 * time.Second); err != nil {
		return err
	}
	b, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	refused := err != nil && strings.Contains(string(b), "already manages engine "+e.host)
	summary["duplicate_escrad_refused"] = b2i(refused)
	say("second escrad on engine h1 (%s) refused: %v (%s)", e.host, refused, strings.TrimSpace(string(b)))
	first.kill()
	return nil
}

// --- C: etcd HA failover, restore -----------------------------------------

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcd() (string, error) {
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return "", errors.New("etcd not installed (scripts/setup.sh installs etcd-server)")
	}
	cp, pp := freePort(), freePort()
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	p, err := start("etcd", "ready to serve client requests", etcd, "--name", "faults", "--data-dir", filepath.Join(tmp, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster", "faults="+peer)
	if err != nil {
		return "", err
	}
	if _, err := p.wait(20 * time.Second); err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", cp), nil
}

type state struct {
	Apps       []adminapi.App       `json:"apps"`
	Hosts      []adminapi.Host      `json:"hosts"`
	Containers []adminapi.Container `json:"containers"`
}

var plain = &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func getState(admin string) (state, bool) {
	var st state
	resp, err := plain.Get("http://" + admin + "/v1/state")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return st, false
	}
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// watchBudgets samples a controller's state every 100 ms and counts
// samples where an app's allocation exceeds its budget.
func watchBudgets(ctx context.Context, admins func() []string, violations *int, samples *int, mu *sync.Mutex) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, a := range admins() {
			st, ok := getState(a)
			if !ok {
				continue
			}
			mu.Lock()
			*samples++
			for _, app := range st.Apps {
				if app.CPUAllocatedCores+app.CPULeasedCores > app.CPUCores+1e-6 || app.MemoryAllocatedBytes > app.MemoryBytes {
					*violations++
				}
			}
			mu.Unlock()
		}
	}
}

func until(d time.Duration, cond func() bool) (time.Duration, bool) {
	t0 := time.Now()
	for time.Since(t0) < d {
		if cond() {
			return time.Since(t0), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(t0), false
}

// haCtrs are the HA step's containers, one per engine, found with 0.6
// core and 160 MiB each: together over the app's 1 core and 256 MiB, so
// the controller must cut both (a container whose found limits fit keeps
// them), and escrad has something to put back.
const (
	haQuotaUs = 60000
	haMem     = 160 << 20
)

func haContainers(admin string, n int) bool {
	st, ok := getState(admin)
	if !ok || len(st.Containers) != n {
		return false
	}
	for _, c := range st.Containers {
		if c.CPUQuotaUs <= 0 {
			return false
		}
	}
	return true
}

func ha() error {
	ep, err := startEtcd()
	if err != nil {
		return err
	}
	args := []string{"--insecure", "--insecure-store", "--store", "etcd://" + ep, "--leader-ttl", "2s"}
	a, err := startController("controller-a", args...)
	if err != nil {
		return err
	}
	if _, ok := until(10*time.Second, func() bool { _, ok := getState(a.admn); return ok }); !ok {
		return errors.New("controller a never led")
	}
	b, err := startController("controller-b", args...)
	if err != nil {
		return err
	}
	body := `{"name":"vms","cpu_cores":1,"memory_bytes":268435456,"sigma":0}`
	if code, out := call(plain, "PUT", "http://"+a.admn+"/v1/apps/vms", body); code != 200 {
		return fmt.Errorf("PUT on the leader: %d %s", code, out)
	}
	var cs []*ctr
	for i, e := range engines[:2] {
		c, err := runContainer(e, fmt.Sprintf("vm%d", i+1), "vms", haMem, haQuotaUs)
		if err != nil {
			return err
		}
		cs = append(cs, c)
		dir := filepath.Join(tmp, fmt.Sprintf("escrad-h%d", i+1))
		os.MkdirAll(dir, 0o700)
		if _, err := start(fmt.Sprintf("escrad-h%d", i+1), "", filepath.Join(*bin, "escrad"), "--docker-host", e.host, "--insecure",
			"--controller", b.sessions+","+a.sessions, "--host-id", fmt.Sprintf("faults-h%d", i+1), "--no-oom-guard", "--oom-state", filepath.Join(dir, "oom-armed"),
			"--lock-dir", dir, "--backend", "cgroupfs", "--restore-after", "6s"); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	violations, samples := 0, 0
	admins := []string{a.admn, b.admn}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go watchBudgets(wctx, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), admins...) }, &violations, &samples, &mu)
	if _, ok := until(20*time.Second, func() bool { return haContainers(a.admn, len(cs)) }); !ok {
		return errors.New("the escrads' containers never joined on the leader")
	}
	say("ha: two escrads (one per engine, given the follower first) registered their containers with the leader")

	a.p.kill()
	took, ok := until(30*time.Second, func() bool { return haContainers(b.admn, len(cs)) })
	if !ok {
		return errors.New("no failover within 30 s")
	}
	summary["failover_s"] = round(took.Seconds())
	say("failover: leader SIGKILLed → the follower leads and holds both escrads' containers in %.2f s", took.Seconds())
	mu.Lock()
	admins = []string{b.admn}
	mu.Unlock()
	time.Sleep(3 * time.Second) // steady control under the new leader, sampled

	// No controller at all: escrad puts back the limits Docker knows (the
	// controller's must be in place first, or nothing is measured).
	limits := func(c *ctr) (string, string) {
		return readGroup(c.rel, "cpu", "cpu.cfs_quota_us"), readGroup(c.rel, "memory", "memory.limit_in_bytes")
	}
	docker := func(c *ctr) bool {
		q, m := limits(c)
		return q == strconv.Itoa(haQuotaUs) && m == strconv.Itoa(haMem)
	}
	all := func(f func(*ctr) bool) func() bool {
		return func() bool {
			for _, c := range cs {
				if !f(c) {
					return false
				}
			}
			return true
		}
	}
	if _, ok := until(10*time.Second, all(func(c *ctr) bool { return !docker(c) })); !ok {
		q, m := limits(cs[0])
		return fmt.Errorf("the controller never cut the containers' limits (vm1: quota %s, memory %s)", q, m)
	}
	var now []string
	for _, c := range cs {
		q, m := limits(c)
		now = append(now, fmt.Sprintf("quota %s memory %s", q, m))
	}
	say("controller's limits in the cgroups: %s (Docker's: quota %d, memory %d)", strings.Join(now, "; "), haQuotaUs, haMem)
	b.p.kill()
	took, ok = until(20*time.Second, all(docker))
	summary["restore_after_setting_s"] = 6
	if ok {
		summary["restore_s"] = round(took.Seconds())
	}
	say("no controller: Docker's limits back in both containers %.2f s after the last controller died (--restore-after 6s): %v", took.Seconds(), ok)
	wcancel()
	mu.Lock()
	summary["budget_violations_controller_view"] = violations
	summary["budget_samples_controller_view"] = samples
	mu.Unlock()
	return nil
}

func round(f float64) float64 { return float64(int(f*1000+0.5)) / 1000 }

// --- D: cgroup v1 trap re-armed (the real-cgroup test) --------------------

func v1Rearm() {
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestV1TrapRearmedAfterRelease$", "./daemon/source/cgroupfs")
	b, err := cmd.CombinedOutput()
	ok := err == nil && bytes.Contains(b, []byte("ok ")) && !bytes.Contains(b, []byte("no tests to run")) && !bytes.Contains(b, []byte("SKIP"))
	summary["v1_rearmed"] = b2i(ok)
	say("cgroup v1 OOM trap re-armed after a release (TestV1TrapRearmedAfterRelease): %v", ok)
}

func main() {
	flag.Parse()
	start := time.Now()
	var err error
	if tmp, err = os.MkdirTemp("", "escra-faults-"); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() { <-sig; cleanup(); stopEngines(""); os.RemoveAll(tmp); os.Exit(1) }()
	failed := 0
	var engErr error
	if *soakFor > 0 || wanted("duplicate") || wanted("ha") || wanted("deposed") || wanted("partition") || wanted("scope") || wanted("outage") || wanted("flood") {
		if engErr = startEngines(2); engErr != nil {
			say("engines: FAILED: %v", engErr)
		}
	}
	if *soakFor > 0 {
		seed := *soakSeed
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		summary["seed"] = seed
		*steps = "none"
		if engErr != nil {
			failed++
		} else if err := soak(*soakFor, seed); err != nil {
			failed++
			say("soak: FAILED: %v", err)
		}
		cleanup()
	}
	for _, step := range []struct {
		name string
		f    func() error
		eng  bool // needs the engines
	}{{"admin", adminAndRestart, false}, {"duplicate", duplicateEscrad, true}, {"ha", ha, true}, {"deposed", deposedSection, true},
		{"partition", partitionSection, true}, {"outage", outageSection, true}, {"scope", scopeSection, true}, {"flood", floodSection, true},
		{"store", storeFirstSection, false}, {"rotate", rotateSection, false}} {
		if !wanted(step.name) {
			continue
		}
		if step.eng && engErr != nil {
			failed++
			say("%s: FAILED: no engines", step.name)
			continue
		}
		if err := step.f(); err != nil {
			failed++
			say("%s: FAILED: %v", step.name, err)
		}
		cleanup() // nothing of one step runs into the next
	}
	if wanted("v1") {
		v1Rearm()
	}
	os.RemoveAll(tmp)
	os.RemoveAll(filepath.Join(*out, "logs"))
	os.MkdirAll(filepath.Join(*out, "logs"), 0o755)
	stopEngines(filepath.Join(*out, "logs")) // their dockerd logs kept
	summary["failed_steps"] = failed
	summary["duration_s"] = round(time.Since(start).Seconds())
	procsMu.Lock()
	for _, p := range procs { // what each process said, for the report's findings
		p.mu.Lock()
		os.WriteFile(filepath.Join(*out, "logs", fmt.Sprintf("%s-%d.log", p.name, p.cmd.Process.Pid)), p.log.Bytes(), 0o644)
		p.mu.Unlock()
	}
	procsMu.Unlock()
	b, _ := json.MarshalIndent(summary, "", "  ")
	os.WriteFile(filepath.Join(*out, "summary.json"), append(b, '\n'), 0o644)
	keys := make([]string, 0, len(summary))
	for k := range summary {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		report = append(report, fmt.Sprintf("%-32s %v", k, summary[k]))
	}
	os.WriteFile(filepath.Join(*out, "report.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
	fmt.Printf("%s\n", b)
	if failed > 0 {
		os.Exit(1)
	}
}

func wanted(step string) bool {
	if *steps == "" {
		return true
	}
	for _, s := range strings.Split(*steps, ",") {
		if s == step {
			return true
		}
	}
	return false
}
