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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/netns"
)

// --- E: a host partitioned from the controller, a healthy sibling ---------
//
// One controller (mutual TLS), two real Docker engines, one real escrad
// per engine, one labelled container of one app on each: h1's escrad runs
// in a network namespace the bench makes (internal/netns: a veth pair,
// 169.254.212.1 on the host's end, .2 inside, no other route), h2's in the
// host's. The controller's session and telemetry ports listen on the
// host's end of the pair, so both escrads reach it (h2's traffic stays on
// loopback: the address is local). memhogs (docker exec) keep both
// containers meeting OOMs. The partition is nft DROP rules in h1's
// namespace on the controller's two ports, for partitionFor: the
// controller must end h1's session within 3 s, every OOM of h1 must end
// (granted, or released to the kernel OOM killer) within the deadline,
// h2's OOMs must keep getting verdicts, and Σ of the limits in the cgroup
// files must stay within the budget.

const partitionFor = 30 * time.Second

// Budget of the app: two containers, each found with 64 MiB and 0.4 core.
const (
	pAppCPU = 1.0
	pAppMem = 320 << 20
	pHogMiB = 128
)

// The partitioned host's namespace: bench-specific names (a rerun removes
// what a killed run left under them) and a link-local /30 that only this
// pair carries.
const (
	nsName   = "escra-faults-h1"
	nsHostIf = "escra-flt0"
)

var nsPrefix = netip.MustParsePrefix("169.254.212.0/30")

var (
	nsMu  sync.Mutex
	nsAll []*netns.NS
)

func makeNS() (*netns.NS, error) {
	n, err := netns.Create(nsName, nsHostIf, nsPrefix)
	if err != nil {
		return nil, err
	}
	nsMu.Lock()
	nsAll = append(nsAll, n)
	nsMu.Unlock()
	return n, nil
}

// removeNS deletes the bench's namespaces and pairs (their processes are
// killed first by cleanup).
func removeNS() {
	nsMu.Lock()
	defer nsMu.Unlock()
	for _, n := range nsAll {
		if err := n.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
		}
	}
	nsAll = nil
}

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

func freeUDPPort(host string) (int, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(host)})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// hostsSetup is what partition and the soak share: a controller, two
// engines with a container each, their escrads, h1's in a namespace.
type hostsSetup struct {
	certs, state string
	ctlArgs      []string
	c            *ctl
	admin        *http.Client
	ns           *netns.NS
	sessPort     int
	uport        int
	ctrs         [2]*ctr
	groups       [2]string
	escrad       [2]*proc
	escradArgs   [2][]string
	metrics      [2]string // escrad /metrics addresses
	mclient      [2]*http.Client
	budget       *budgetSampler
}

// cut partitions h1 from the controller: DROP both ways on the session
// (TCP) and telemetry (UDP) ports, in h1's namespace.
func (s *hostsSetup) cut() error {
	return s.ns.Drop(netns.Port{Proto: "tcp", Port: s.sessPort}, netns.Port{Proto: "udp", Port: s.uport})
}

func (s *hostsSetup) heal() error { return s.ns.Heal() }

// oomCounts reads escrad i's OOM events and outcomes from its /metrics.
func (s *hostsSetup) oomCounts(i int) map[string]float64 {
	out := map[string]float64{}
	resp, err := s.mclient[i].Get("http://" + s.metrics[i] + "/metrics")
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
	if len(engines) < 2 {
		return nil, errors.New("two engines needed")
	}
	if b, err := runOut(filepath.Join(*bin, "escractl"), "certs", "--dir", s.certs, "--hosts", "h1,h2", "--apps", "flt-mem"); err != nil {
		return nil, fmt.Errorf("escractl certs: %v: %s", err, b)
	}
	var err error
	if s.ns, err = makeNS(); err != nil {
		return nil, err
	}
	at := s.ns.HostAddr.String()
	if s.uport, err = freeUDPPort(at); err != nil {
		return nil, err
	}
	s.ctlArgs = append([]string{"--tls-ca", auth.CAPath(s.certs), "--tls-cert", auth.CertPath(s.certs, "controller"), "--tls-key", auth.KeyPath(s.certs, "controller"),
		"--state-dir", s.state, "--listen", at + ":0", "--telemetry-listen", fmt.Sprintf("%s:%d", at, s.uport), "--telemetry-advertise", fmt.Sprintf(":%d", s.uport),
		"--reclaim-every", "1s"}, extraCtl...)
	if s.c, err = startController(name+"-controller", s.ctlArgs...); err != nil {
		return nil, err
	}
	_, p, _ := net.SplitHostPort(s.c.sessions)
	s.sessPort, _ = strconv.Atoi(p)
	if s.admin, err = client(s.certs, "admin"); err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`{"name":"flt-mem","cpu_cores":%g,"memory_bytes":%d,"sigma":0.25}`, pAppCPU, pAppMem)
	if code, out := call(s.admin, "PUT", "https://"+s.c.admn+"/v1/apps/flt-mem", body); code != 200 {
		return nil, fmt.Errorf("PUT flt-mem: %d %s", code, out)
	}
	for i := range s.ctrs {
		if s.ctrs[i], err = runContainer(engines[i], fmt.Sprintf("%s-c%d", name, i+1), "flt-mem", 64<<20, 40000); err != nil {
			return nil, err
		}
		s.groups[i] = s.ctrs[i].rel
	}
	s.budget = newBudgetSampler(s.groups[:], pAppCPU, pAppMem)
	for i := range 2 {
		host := fmt.Sprintf("h%d", i+1)
		dir := filepath.Join(tmp, name+"-"+host)
		os.MkdirAll(dir, 0o700)
		var pre []string
		if i == 0 { // inside the namespace: its /metrics on the inner end
			pre = []string{"nsenter", "--net=" + s.ns.Path(), "--"}
			s.metrics[i] = fmt.Sprintf("%s:%d", s.ns.Addr, 9470)
			s.mclient[i] = s.ns.HTTPClient(2 * time.Second) // over the pair only
		} else {
			s.metrics[i] = fmt.Sprintf("127.0.0.1:%d", freePort())
			s.mclient[i] = &http.Client{Timeout: 2 * time.Second}
		}
		s.escradArgs[i] = append(append(pre, filepath.Join(*bin, "escrad"), "--docker-host", engines[i].host, "--metrics-listen", s.metrics[i],
			"--controller", s.c.sessions, "--host-id", host, "--backend", "cgroupfs",
			"--tls-ca", auth.CAPath(s.certs), "--tls-cert", auth.CertPath(s.certs, host), "--tls-key", auth.KeyPath(s.certs, host),
			"--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir), extraEscrad(i)...)
		if s.escrad[i], err = startWith(name+"-escrad-"+host, "", s.budget.watch(i), s.escradArgs[i]...); err != nil {
			return nil, err
		}
	}
	if _, ok := until(30*time.Second, func() bool {
		st, ok := stateTLS(s.admin, s.c.admn)
		return ok && len(st.Containers) == 2
	}); !ok {
		return nil, fmt.Errorf("the two escrads never registered their containers; h1: %s; h2: %s", s.escrad[0].tail(), s.escrad[1].tail())
	}
	return s, nil
}

func partitionSection() error {
	s, err := setupHosts("part", nil, func(int) []string { return nil })
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.budget.run(ctx)
	var hmu sync.Mutex
	runs, kills := [2]int{}, [2]int{}
	h1ctx, h1stop := context.WithCancel(ctx)
	go hogLoop(h1ctx, s.ctrs[0], pHogMiB, &runs[0], &kills[0], &hmu)
	go hogLoop(ctx, s.ctrs[1], pHogMiB, &runs[1], &kills[1], &hmu)
	epsc := make(chan []episode, 1)
	go func() { epsc <- oomWatch(ctx, s.groups[:]) }()
	say("partition: two engines, an escrad each (h1 in namespace %s, %v ↔ %v), memhogs of %d MiB in both containers; warm-up 10 s",
		s.ns.Name, s.ns.HostAddr, s.ns.Addr, pHogMiB)
	time.Sleep(10 * time.Second)

	// The cut comes while the controller's reclaim holds h1 below one hog,
	// so every hog of the partition needs memory only a controller could
	// grant: h1's hogs pause until its limit is down (or 15 s passed).
	h1stop()
	limit := func() int64 {
		m, _ := strconv.ParseInt(readGroup(s.groups[0], "memory", "memory.limit_in_bytes"), 10, 64)
		return m
	}
	if _, ok := until(15*time.Second, func() bool { return limit() < pHogMiB<<20 }); !ok {
		say("partition: h1's limit still %d MiB at the cut (not below a hog)", limit()>>20)
	}
	summary["partition_h1_limit_at_cut_mib"] = limit() >> 20
	c0 := [2]map[string]float64{s.oomCounts(0), s.oomCounts(1)}
	if err := s.cut(); err != nil {
		return err
	}
	go hogLoop(ctx, s.ctrs[0], pHogMiB, &runs[0], &kills[0], &hmu)
	p0 := time.Now() // the rules are in force
	_, ok := until(15*time.Second, func() bool {
		st, ok := stateTLS(s.admin, s.c.admn)
		return ok && hostSessions(st, "h1") == 0
	})
	took := time.Since(p0)
	if !ok {
		return errors.New("partitioned session never declared dead")
	}
	summary["partition_detect_s"] = round(took.Seconds())
	say("partition: cut at %s: nft in %s drops tcp %d and udp %d to and from %v (netdev ingress/egress of %s):\n%s", p0.UTC().Format("15:04:05.000"),
		s.ns.Name, s.sessPort, s.uport, s.ns.HostAddr, s.ns.PeerIf, strings.TrimSpace(s.ns.Rules()))
	say("partition: the controller ended h1's session %.2f s after the cut", took.Seconds())
	time.Sleep(time.Until(p0.Add(partitionFor)))
	p1 := time.Now()
	c1 := [2]map[string]float64{s.oomCounts(0), s.oomCounts(1)}
	if err := s.heal(); err != nil {
		return err
	}
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
