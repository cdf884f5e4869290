package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// --- E: a host partitioned from the controller, a healthy sibling ---------
//
// One controller (mutual TLS), two real escrads on two real cgroups of one
// app: h1 reaches the controller only through gateProxy (session TCP and
// telemetry UDP), h2 directly. memhogs keep both groups meeting OOMs. The
// proxy is cut for partitionFor: the controller must end h1's session
// within 3 s, every OOM of h1 must end (granted, or released to the kernel
// OOM killer) within the deadline, h2's OOMs must keep getting verdicts,
// and Σ of the limits in the cgroup files must stay within the budget.

const partitionFor = 30 * time.Second

// Budget of the app: two groups, each found with 64 MiB and 0.4 core.
const (
	pAppCPU = 1.0
	pAppMem = 320 << 20
	pHogMiB = 128
)

func stateTLS(c *http.Client, admin string) (state, bool) {
	var st state
	resp, err := c.Get("https://" + admin + "/v1/state")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return st, false
	}
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

func hostSessions(st state, host string) int {
	n := 0
	for _, h := range st.Hosts {
		if h.HostID == host {
			n++
		}
	}
	return n
}

// udpPortFreeOn picks a UDP port free on both 127.0.0.1 and 127.0.0.2: the
// controller listens on the first, the proxy on the second, and escrad
// sends telemetry to its TCP peer's address at that port (the controller
// advertises ":PORT").
func udpPortFreeOn() (int, error) {
	for range 20 {
		a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return 0, err
		}
		port := a.LocalAddr().(*net.UDPAddr).Port
		b, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		a.Close()
		if err == nil {
			b.Close()
			return port, nil
		}
	}
	return 0, errors.New("no UDP port free on 127.0.0.1 and 127.0.0.2")
}

// hostsSetup is what partition and the soak share: a controller, a proxy
// in front of it for h1, two groups and their escrads.
type hostsSetup struct {
	certs, state string
	ctlArgs      []string
	c            *ctl
	admin        *http.Client
	px           *gateProxy
	uport        int
	groups       [2]string
	escrad       [2]*proc
	escradArgs   [2][]string
	metrics      [2]string // escrad /metrics addresses
	budget       *budgetSampler
}

// oomCounts reads escrad's OOM events and outcomes from its /metrics.
func oomCounts(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[0], "escrad_oom_") {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		out[f[0]] = v
	}
	return out
}

// withUnseen adds the OOM events the 5 ms poller never saw (resolved
// within a poll) as 5 ms each, an upper bound, to the seen episodes.
func withUnseen(seen []float64, events float64) []float64 {
	all := append([]float64(nil), seen...)
	for range max(0, int(events)-len(seen)) {
		all = append(all, 5)
	}
	sort.Float64s(all)
	return all
}

func setupHosts(name string, extraCtl []string, extraEscrad func(i int) []string) (*hostsSetup, error) {
	s := &hostsSetup{certs: filepath.Join(tmp, name+"-certs"), state: filepath.Join(tmp, name+"-state")}
	if b, err := runOut(filepath.Join(*bin, "escractl"), "certs", "--dir", s.certs, "--hosts", "h1,h2"); err != nil {
		return nil, fmt.Errorf("escractl certs: %v: %s", err, b)
	}
	if err := buildMemhog(); err != nil {
		return nil, err
	}
	var err error
	if s.uport, err = udpPortFreeOn(); err != nil {
		return nil, err
	}
	if s.px, err = newGateProxy("127.0.0.2:0", fmt.Sprintf("127.0.0.2:%d", s.uport)); err != nil {
		return nil, fmt.Errorf("proxy on 127.0.0.2: %w", err)
	}
	s.ctlArgs = append([]string{"--tls-ca", auth.CAPath(s.certs), "--tls-cert", auth.CertPath(s.certs, "controller"), "--tls-key", auth.KeyPath(s.certs, "controller"),
		"--state-dir", s.state, "--telemetry-listen", fmt.Sprintf("127.0.0.1:%d", s.uport), "--telemetry-advertise", fmt.Sprintf(":%d", s.uport),
		"--reclaim-every", "1s"}, extraCtl...)
	if s.c, err = startController(name+"-controller", s.ctlArgs...); err != nil {
		return nil, err
	}
	if err := s.px.start(s.c.sessions, fmt.Sprintf("127.0.0.1:%d", s.uport)); err != nil {
		return nil, err
	}
	if s.admin, err = client(s.certs, "admin"); err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`{"name":"flt-mem","cpu_cores":%g,"memory_bytes":%d,"sigma":0.25}`, pAppCPU, pAppMem)
	if code, out := call(s.admin, "PUT", "https://"+s.c.admn+"/v1/apps/flt-mem", body); code != 200 {
		return nil, fmt.Errorf("PUT flt-mem: %d %s", code, out)
	}
	for i := range s.groups {
		if s.groups[i], err = makeGroup(fmt.Sprintf("%s-g%d", name, i+1), 64<<20, 40000); err != nil {
			return nil, err
		}
	}
	s.budget = newBudgetSampler(s.groups[:], pAppCPU, pAppMem)
	for i, to := range []string{s.px.addr(), s.c.sessions} {
		host := fmt.Sprintf("h%d", i+1)
		dir := filepath.Join(tmp, name+"-"+host)
		os.MkdirAll(dir, 0o700)
		cfg := filepath.Join(dir, "escrad.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("cgroups:\n  - {name: %s-c%d, app: flt-mem, path: %s}\n", name, i+1, s.groups[i])), 0o600)
		s.metrics[i] = fmt.Sprintf("127.0.0.1:%d", freePort())
		s.escradArgs[i] = append([]string{filepath.Join(*bin, "escrad"), "--no-docker", "--metrics-listen", s.metrics[i], "--config", cfg, "--controller", to, "--host-id", host,
			"--tls-ca", auth.CAPath(s.certs), "--tls-cert", auth.CertPath(s.certs, host), "--tls-key", auth.KeyPath(s.certs, host),
			"--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir, "--backend", "cgroupfs"}, extraEscrad(i)...)
		if slices.Contains(s.escradArgs[i], "--docker-host") {
			s.escradArgs[i] = slices.DeleteFunc(s.escradArgs[i], func(a string) bool { return a == "--no-docker" })
		}
		if s.escrad[i], err = startWith(name+"-escrad-"+host, "", s.budget.watch(i), s.escradArgs[i]...); err != nil {
			return nil, err
		}
	}
	if _, ok := until(20*time.Second, func() bool {
		st, ok := stateTLS(s.admin, s.c.admn)
		return ok && len(st.Containers) == 2
	}); !ok {
		return nil, fmt.Errorf("the two escrads never registered their groups; h1: %s; h2: %s", s.escrad[0].tail(), s.escrad[1].tail())
	}
	return s, nil
}

func (s *hostsSetup) close() {
	if s.px != nil {
		s.px.close()
	}
}

func partitionSection() error {
	s, err := setupHosts("part", nil, func(int) []string { return nil })
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.budget.run(ctx)
	var hmu sync.Mutex
	runs, kills := [2]int{}, [2]int{}
	for i := range s.groups {
		go hogLoop(ctx, s.groups[i], pHogMiB, &runs[i], &kills[i], &hmu)
	}
	epsc := make(chan []episode, 1)
	go func() { epsc <- oomWatch(ctx, s.groups[:]) }()
	say("partition: two escrads (h1 through the proxy, h2 direct), memhogs of %d MiB in both groups; warm-up 10 s", pHogMiB)
	time.Sleep(10 * time.Second)

	c0 := [2]map[string]float64{oomCounts(s.metrics[0]), oomCounts(s.metrics[1])}
	p0 := time.Now()
	s.px.cut()
	took, ok := until(15*time.Second, func() bool {
		st, ok := stateTLS(s.admin, s.c.admn)
		return ok && hostSessions(st, "h1") == 0
	})
	if !ok {
		return errors.New("partitioned session never declared dead")
	}
	summary["partition_detect_s"] = round(took.Seconds())
	say("partition: cut at %s", p0.UTC().Format("15:04:05.000"))
	say("partition: the controller ended h1's session %.2f s after the cut (no iptables: the proxy holds its bytes)", took.Seconds())
	time.Sleep(time.Until(p0.Add(partitionFor)))
	p1 := time.Now()
	c1 := [2]map[string]float64{oomCounts(s.metrics[0]), oomCounts(s.metrics[1])}
	s.px.heal()
	say("partition: healed at %s", p1.UTC().Format("15:04:05.000"))
	if _, ok := until(20*time.Second, func() bool {
		st, ok := stateTLS(s.admin, s.c.admn)
		return ok && hostSessions(st, "h1") == 1 && len(st.Containers) == 2
	}); !ok {
		return errors.New("h1 never came back after the heal")
	}
	time.Sleep(4 * time.Second) // a stale second session would show by now
	st, _ := stateTLS(s.admin, s.c.admn)
	summary["sessions_per_host_after_heal"] = hostSessions(st, "h1")
	cancel()
	eps := <-epsc

	base2 := within(eps, s.groups[1], p0.Add(-10*time.Second), p0)
	h1 := within(eps, s.groups[0], p0, p1)
	h2 := within(eps, s.groups[1], p0, p1)
	ev := func(i int, k string) float64 { return c1[i][k] - c0[i][k] }
	h1all := withUnseen(h1, ev(0, "escrad_oom_events_total"))
	h2all := withUnseen(h2, ev(1, "escrad_oom_events_total"))
	summary["partition_oom_events"] = ev(0, "escrad_oom_events_total")
	summary["partition_oom_granted"] = ev(0, `escrad_oom_outcomes_total{outcome="granted"}`)
	summary["partition_oom_released_deadline"] = ev(0, `escrad_oom_outcomes_total{outcome="deadline"}`)
	summary["partition_oom_released_controller_lost"] = ev(0, `escrad_oom_outcomes_total{outcome="controller_lost"}`) + ev(0, `escrad_oom_outcomes_total{outcome="controller_unreachable"}`)
	summary["partition_oom_released_p99_ms"] = ms(pct(h1all, 99))
	summary["partition_oom_seen_p99_ms"] = ms(pct(h1, 99))
	summary["healthy_host_oom_events_during_sibling_partition"] = ev(1, "escrad_oom_events_total")
	summary["healthy_host_oom_granted_during_sibling_partition"] = ev(1, `escrad_oom_outcomes_total{outcome="granted"}`)
	summary["healthy_host_oom_denied_during_sibling_partition"] = ev(1, `escrad_oom_outcomes_total{outcome="denied"}`)
	summary["healthy_host_oom_verdict_p99_ms_during_sibling_partition"] = ms(pct(h2all, 99))
	summary["healthy_host_oom_seen_p99_ms_during_sibling_partition"] = ms(pct(h2, 99))
	summary["partition_s"] = round(p1.Sub(p0).Seconds())
	summary["partition_oom_episodes"] = len(h1)
	summary["partition_oom_max_ms"] = ms(pct(h1, 100))
	summary["healthy_host_oom_episodes_during_sibling_partition"] = len(h2)
	summary["healthy_host_oom_verdict_p99_ms_before_partition"] = ms(pct(base2, 99))
	// A release leaves the group to the kernel OOM killer; the trap is set
	// again by escrad's watchdog. More than one episode in h1's group while
	// no controller answers proves a real escrad re-armed it after a miss.
	summary["v1_rearmed_by_escrad_during_partition"] = b2i(len(h1) >= 2)
	hmu.Lock()
	summary["partition_hog_runs"] = runs[0] + runs[1]
	summary["partition_hogs_oom_killed"] = kills[0] + kills[1]
	hmu.Unlock()
	s.budget.mu.Lock()
	summary["budget_violations"] = len(s.budget.violAt)
	summary["budget_samples"] = s.budget.samples
	summary["budget_violations_incl_restored_groups"] = s.budget.allViol
	summary["budget_max_applied_memory_bytes"] = s.budget.maxMem
	summary["budget_max_applied_cpu_cores"] = round(s.budget.maxCPU)
	if s.budget.firstViol != "" {
		say("budget exceeded in the cgroup files: first %s; last %s", s.budget.firstViol, s.budget.lastVio)
	}
	s.budget.mu.Unlock()
	say("partition %.0f s: h1 %d OOM events (%d seen waiting ≥ 5 ms), p99 %.1f ms (max %.1f); h2 %d events (%d seen), p99 %.1f ms; h1 sessions after the heal %v",
		p1.Sub(p0).Seconds(), len(h1all), len(h1), pct(h1all, 99), pct(h1, 100), len(h2all), len(h2), pct(h2all, 99), summary["sessions_per_host_after_heal"])
	return nil
}

func runOut(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// ms is a figure for summary.json: null when nothing was measured.
func ms(f float64) any {
	if math.IsNaN(f) {
		return nil
	}
	return round(f)
}
