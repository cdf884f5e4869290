// Command bench-reaction measures how soon escrad tells the controller
// that a container bursting out of idle runs into its quota: a separate
// escrad (cgroupfs backend, the flags in -escrad-args) manages one idle
// container with a 10 ms / 100 ms quota, and optionally a sibling under
// the same parent cgroup that runs 1 ms every 100 ms (so the parent is
// never idle). The bursting container runs one busy thread and is kept
// frozen (v1 freezer) while idle; each burst thaws it at a random phase of
// the period, for 500 ms: the thaw is the burst's start (docker exec would
// add its own variable start-up, itself throttled by the 10 ms quota), its
// answer the first record the scripted controller receives for it that
// is a throttle event (mid_period) or a throttled period record. It writes
// summary.json (latency p50/p90/max, how many were answered by an event)
// to -out and removes what it started. cgroup v1 with the cgroupfs
// driver only (as bench-daemon's CPU phase).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

var (
	out        = flag.String("out", "results/reaction", "output directory")
	bursts     = flag.Int("bursts", 20, "bursts to time")
	sibling    = flag.Bool("sibling", false, "also run a sibling at 1 ms per 100 ms under the same parent (the parent is never idle)")
	escradArgs = flag.String("escrad-args", "", "extra escrad flags, space-separated (e.g. --throttle-warm 0)")
	verbose    = flag.Bool("v", false, "print every record of the bursting container during a burst")
)

func say(format string, a ...any) { fmt.Printf("bench-reaction: "+format+"\n", a...) }

var (
	mu      sync.Mutex
	started []string
	cli     *client.Client
	parent  = fmt.Sprintf("/escra-react-%d", os.Getpid())
	freezer string // the bursting container's freezer group, once known
)

func cleanup() {
	mu.Lock()
	if freezer != "" { // a frozen container would not stop
		_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0)
	}
	ids := started
	started = nil
	mu.Unlock()
	for _, id := range ids {
		dockertest.Remove(cli, id)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "cpuset", "pids", "blkio", "devices", "freezer", "hugetlb", "perf_event", "net_cls,net_prio", "systemd", "unified"} {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", c, parent))
	}
}

func die(err error) {
	fmt.Fprintln(os.Stderr, "bench-reaction:", err)
	cleanup()
	os.Exit(1)
}

func start(ctx context.Context, img, name string, cmd []string) string {
	id, err := dockertest.Start(ctx, cli, dockertest.Spec{Name: fmt.Sprintf("bench-react-%s-%d", name, os.Getpid()), Image: img, Cmd: cmd,
		CgroupParent: parent, Labels: map[string]string{containers.AppLabel: "bench-react"},
		Resources: container.Resources{CPUQuota: 10000, CPUPeriod: 100000, Memory: 32 << 20, MemorySwap: 32 << 20}})
	if id != "" {
		mu.Lock()
		started = append(started, id)
		mu.Unlock()
	}
	if err != nil {
		die(err)
	}
	return id
}

// firstAnswer keeps, per burst, when the first throttle event or
// throttled record for the bursting container arrived.
type firstAnswer struct {
	mu    sync.Mutex
	h     uint32
	armed bool
	at    time.Time
	event bool
	t0    time.Time // the burst's start (-v)
}

func (f *firstAnswer) see(s *pb.CpuStat) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if *verbose && f.armed && s.Handle == f.h {
		say("  %v: seq %d mid %v throttled %v usage %d µs", now.Sub(f.t0).Round(100*time.Microsecond), s.PeriodSeq, s.MidPeriod, s.Throttled, s.UsageUs)
	}
	if f.armed && s.Handle == f.h && (s.MidPeriod || s.Throttled) && f.at.IsZero() {
		f.at, f.event = now, s.MidPeriod
	}
}

func (f *firstAnswer) arm(t0 time.Time) {
	f.mu.Lock()
	f.armed, f.at, f.event, f.t0 = true, time.Time{}, false, t0
	f.mu.Unlock()
}

func (f *firstAnswer) get() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at, f.event
}

func main() {
	flag.Parse()
	var err error
	if cli, err = containers.NewDockerClient("unix://" + dockertest.Socket); err != nil {
		die(err)
	}
	ctx := context.Background()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		die(fmt.Errorf("docker engine: %w (run make setup)", err))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; say("interrupted: removing containers"); cleanup(); os.Exit(130) }()
	defer cleanup()
	img, err := dockertest.ImportWorkloads(ctx, cli)
	if err != nil {
		die(err)
	}
	bin, err := os.MkdirTemp("", "escra-react-")
	if err != nil {
		die(err)
	}
	defer os.RemoveAll(bin)
	if err := dockertest.BuildBinaries(bin, "./daemon/cmd/escrad"); err != nil {
		die(err)
	}
	burster := start(ctx, img, "burst", []string{"-threads", "1"})
	if *sibling {
		start(ctx, img, "sib", []string{"-duty", "0.01"})
	}
	j, err := dockertest.Inspect(ctx, cli, burster)
	if err != nil {
		die(err)
	}
	paths, err := cgroups.PathsForPID(j.State.Pid)
	if err != nil || paths.Version != cgroups.V1 {
		die(fmt.Errorf("cgroup v1 needed: %v %v", paths.Version, err))
	}
	fz, err := freezerOf(j.State.Pid)
	if err != nil {
		die(err)
	}
	mu.Lock()
	freezer = fz
	mu.Unlock()
	if err := setFrozen(freezer, true); err != nil {
		die(err)
	}

	p, err := peer.Start()
	if err != nil {
		die(err)
	}
	defer p.Close()
	fa := &firstAnswer{}
	p.OnCPU(fa.see)
	cmd := exec.Command(filepath.Join(bin, "escrad"), "--insecure", "--controller", p.Addr(), "--backend", "cgroupfs", "--period", "100ms",
		"--docker-host", "unix://"+dockertest.Socket, "--host-id", "bench-react", "--log-level", "warn", "--apps", "bench-react")
	cmd.Args = append(cmd.Args, strings.Fields(*escradArgs)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		die(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	reg := p.WaitRegistered(burster, 20*time.Second)
	if reg == nil {
		die(fmt.Errorf("idle container not registered"))
	}
	fa.mu.Lock()
	fa.h = reg.Handle
	fa.mu.Unlock()
	time.Sleep(2 * time.Second)

	var lat []float64
	events, records, missed := 0, 0, 0
	for i := 0; i < *bursts; i++ {
		// Idle for more than a period, then a random phase of it.
		time.Sleep(time.Second + time.Duration(rand.Int64N(int64(100*time.Millisecond))))
		t0 := time.Now()
		fa.arm(t0)
		if err := setFrozen(freezer, false); err != nil {
			die(err)
		}
		var at time.Time
		var ev bool
		for deadline := t0.Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if at, ev = fa.get(); !at.IsZero() {
				break
			}
		}
		if at.IsZero() {
			missed++
			say("burst %d: no answer within 1 s", i)
			if err := setFrozen(freezer, true); err != nil {
				die(err)
			}
			continue
		}
		d := at.Sub(t0)
		lat = append(lat, float64(d.Microseconds())/1000)
		if ev {
			events++
		} else {
			records++
		}
		say("burst %d: answered in %.1f ms by %s", i, float64(d.Microseconds())/1000, map[bool]string{true: "a throttle event", false: "a period record"}[ev])
		time.Sleep(time.Until(t0.Add(500 * time.Millisecond)))
		if err := setFrozen(freezer, true); err != nil {
			die(err)
		}
	}
	sort.Float64s(lat)
	sum := map[string]any{
		"escrad_args": *escradArgs, "sibling": *sibling, "bursts": *bursts, "answered_by_event": events,
		"answered_by_record": records, "missed": missed,
		"reaction_ms_p50": q(lat, 0.5), "reaction_ms_p90": q(lat, 0.9), "reaction_ms_max": q(lat, 1),
	}
	say("reaction p50 %.1f ms, p90 %.1f ms, max %.1f ms; %d by event, %d by record, %d missed",
		q(lat, 0.5), q(lat, 0.9), q(lat, 1), events, records, missed)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		die(err)
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		die(err)
	}
}

// freezerOf is the v1 freezer directory of pid's cgroup.
func freezerOf(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "freezer" {
			return filepath.Join("/sys/fs/cgroup/freezer", f[2]), nil
		}
	}
	return "", fmt.Errorf("pid %d: no v1 freezer cgroup", pid)
}

// setFrozen freezes or thaws the group and, when freezing, waits until
// it is frozen (no task runs, its usage stands still).
func setFrozen(dir string, frozen bool) error {
	state := map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]
	// A freeze can stall on a loaded host (a task throttled by its quota
	// reaches no freezing point until it runs again); it is asked again.
	for i, deadline := 0, time.Now().Add(20*time.Second); time.Now().Before(deadline); i++ {
		if i%100 == 0 {
			if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0); err != nil {
				return err
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == state {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("%s: not %s within 20 s", dir, state)
}

func q(xs []float64, f float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	return xs[int(f*float64(len(xs)-1)+0.5)]
}
