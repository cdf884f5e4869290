package telebench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// fake emits one record per watched handle every tick; handles in wrong
// get the opposite flag, handle 1 also gets a throttle event per tick.
type fake struct {
	mu      sync.Mutex
	watched map[uint32]bool
	busy    map[uint32]bool
	wrong   map[uint32]bool
	tick    time.Duration
}

func (f *fake) Backend() pb.Backend { return pb.Backend_BACKEND_CGROUPFS }
func (f *fake) Watch(h uint32, _ *cgroups.Group) error {
	f.mu.Lock()
	f.watched[h] = true
	f.mu.Unlock()
	return nil
}
func (f *fake) Unwatch(h uint32) {
	f.mu.Lock()
	delete(f.watched, h)
	f.mu.Unlock()
}
func (f *fake) Resolve(rescue.Event, bool, int64) error { return nil }
func (f *fake) Run(ctx context.Context, sink source.Sink) error {
	t := time.NewTicker(f.tick)
	defer t.Stop()
	seq := uint64(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		seq++
		f.mu.Lock()
		var hs []uint32
		for h := range f.watched {
			hs = append(hs, h)
		}
		f.mu.Unlock()
		for _, h := range hs {
			thr := f.busy[h] != f.wrong[h]
			sink.CPU(&pb.CpuStat{Handle: h, PeriodSeq: seq, Throttled: thr})
			if h == 1 {
				sink.CPU(&pb.CpuStat{Handle: h, MidPeriod: true})
			}
		}
		sink.Flush()
	}
}

func TestCompareCountsRecordsFlagsAndCPU(t *testing.T) {
	gs := []Group{{Busy: true}, {Busy: false}, {Busy: false}}
	var made []*fake
	spec := func(name string, wrong map[uint32]bool, kernelNs uint64) Spec {
		return Spec{Name: name, CFSPeriods: name == "k", New: func(alone bool) (Backend, error) {
			f := &fake{watched: map[uint32]bool{}, busy: map[uint32]bool{1: true}, wrong: wrong, tick: 10 * time.Millisecond}
			made = append(made, f)
			var n uint64
			return Backend{Src: f, Probe: func() Counters {
				n += kernelNs
				return Counters{KernelNs: n, Dropped: n / kernelNs, PartsNs: map[string]uint64{"hook": n}}
			}}, nil
		}}
	}
	rs, err := Compare(Config{Groups: gs, Window: 300 * time.Millisecond,
		Together:  []Spec{spec("k", nil, 1000), spec("c", map[uint32]bool{3: true}, 1000)},
		AloneOnly: []Spec{spec("w", nil, 1000)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(made) != 5 {
		t.Fatalf("made %d backends, want 2 together + 3 alone", len(made))
	}
	k, c, w := rs["k"], rs["c"], rs["w"]
	if k.Records < 30 || c.Records < 30 || w.Records < 30 {
		t.Fatalf("records k %d c %d w %d, want >= 30 each in 300 ms at 3 per 10 ms", k.Records, c.Records, w.Records)
	}
	if k.FlagErrors != 0 || c.LightErrors == 0 || c.BusyErrors != 0 || c.FlagErrors != c.LightErrors {
		t.Fatalf("flag errors: k %+v, c %+v", k, c)
	}
	if k.BusyRecords+k.LightRecords != k.Records || k.EventsPerS == 0 {
		t.Fatalf("k: busy %d + light %d != %d, events/s %v", k.BusyRecords, k.LightRecords, k.Records, k.EventsPerS)
	}
	if k.KernelUs != 1 || k.PartsUs["hook"] != 1 || k.CPUUsPerRec <= 0 || k.AloneRecords == 0 {
		t.Fatalf("k CPU: kernel %v us, parts %v, per record %v, alone records %d", k.KernelUs, k.PartsUs, k.CPUUsPerRec, k.AloneRecords)
	}
	if k.Dropped != 2 { // one per window
		t.Fatalf("k dropped %d, want 2", k.Dropped)
	}
	keys := Keys("kernel", k)
	for _, want := range []string{"kernel_records_delivered_per_s", "kernel_cpu_us_per_record", "kernel_throttle_flag_errors",
		"kernel_throttle_flag_missed_vs_kernel", "kernel_hook_us"} {
		if _, ok := keys[want]; !ok {
			t.Errorf("Keys lacks %s", want)
		}
	}
	if _, ok := Keys("cgroupfs", c)["cgroupfs_throttle_flag_missed_vs_kernel"]; ok {
		t.Error("missed_vs_kernel for a backend whose records are not CFS periods")
	}
	sum := map[string]any{"kernel_cpu_us_per_record": 2.0, "cgroupfs_cpu_us_per_record": 8.0,
		"bpf_records_delivered_per_s": 600.0, "host_cgroupfs_records_delivered_per_s": 1000.0}
	Ratios(sum)
	if sum["ratio_cpu_us_per_record_kernel_over_cgroupfs"] != 0.25 || sum["ratio_records_delivered_per_s_bpf_over_host_cgroupfs"] != 0.6 {
		t.Fatalf("ratios: %v", sum)
	}
	if _, ok := sum["ratio_cpu_us_per_record_bpf_over_host_cgroupfs"]; ok {
		t.Fatal("a ratio without both sides")
	}
}
