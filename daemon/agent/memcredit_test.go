package agent

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Host-local memory credit on a real group, the agent's books alone:
// without credit an OOM is not answered (it goes to the controller); with
// credit the limit rises by the app's step, or what the allocation wants
// when more, or what the credit has down to that; each use is reported;
// an exhausted credit, a container not listed and one at its own limit or
// its max_memory fall back; a revoke returns what is left; the session's
// end drops it.
func TestMemCreditAnswersOOMs(t *testing.T) {
	const mib = 1 << 20
	rel := cgtest.New(t, "agent-memcredit")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(32*mib))
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a, err := New(Config{Controller: p.Addr(), Backend: BackendCgroupfs, Heartbeat: 100 * time.Millisecond,
		Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.link.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	a.add(containers.Container{ID: "cgroup:" + rel, Name: "vm1", App: "vms", CgroupPath: rel})
	reg := p.WaitRegistered("cgroup:"+rel, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	h := reg.Handle
	limit := func() int64 {
		v, _ := strconv.ParseInt(strings.TrimSpace(cgtest.Read(t, "memory", rel, "memory.limit_in_bytes")), 10, 64)
		return v
	}
	c := &rescue.Container{H: h, Name: "vm1", App: "vms", Ceiling: 1 << 30}
	oom := func(pages uint64) (int64, bool) {
		return a.Grant(c, rescue.Event{Handle: h, Limit: limit(), Pages: pages})
	}

	if _, ok := oom(0); ok {
		t.Fatal("answered without credit")
	}
	a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 3, AddBytes: 40 * mib, StepBytes: 16 * mib,
		MembersSet: true, Members: []*pb.MemCreditMember{{Handle: h}}})
	if got, ok := oom(0); !ok || got != 48*mib || limit() != 48*mib {
		t.Fatalf("step grant: %d %v, group %d; want 32 + 16 MiB", got, ok, limit())
	}
	if got, ok := oom(20 * mib / 4096); !ok || got != 68*mib {
		t.Fatalf("a grant covers what the allocation wants: %d %v", got, ok)
	}
	if got, ok := oom(0); !ok || got != 72*mib {
		t.Fatalf("what the credit has, down to a page: %d %v", got, ok)
	}
	if _, ok := oom(0); ok {
		t.Fatal("answered from an exhausted credit")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if uses, _ := p.MemCreditMessages(); len(uses) == 3 {
			var sum int64
			for _, u := range uses {
				sum += u.AmountBytes
				if u.CreditId != 3 || u.Handle != h || u.App != "vms" {
					t.Fatalf("use %+v", u)
				}
			}
			if sum != 40*mib || uses[2].LimitBytes != 72*mib {
				t.Fatalf("uses %v: want 40 MiB in all, the last writing 72 MiB", uses)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the uses never reached the controller")
		}
	}

	// The container's own limit and its max_memory bound a grant.
	a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 4, AddBytes: 100 * mib, StepBytes: 16 * mib,
		MembersSet: true, Members: []*pb.MemCreditMember{{Handle: h, MaxBytes: 80 * mib}}})
	if got, ok := oom(0); !ok || got != 80*mib {
		t.Fatalf("max_memory: %d %v; want 80 MiB", got, ok)
	}
	if _, ok := oom(0); ok {
		t.Fatal("answered at max_memory")
	}
	a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 4, MembersSet: true, Members: []*pb.MemCreditMember{{Handle: h}}})
	c.Ceiling = 84 * mib
	if got, ok := oom(0); !ok || got != 84*mib {
		t.Fatalf("the container's own limit: %d %v; want 84 MiB", got, ok)
	}
	c.Ceiling = 1 << 30
	a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 4, MembersSet: true})
	if _, ok := oom(0); ok {
		t.Fatal("answered for a container the credit does not list")
	}
	if ret := a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 9, Revoke: true}); ret.RemainingBytes != 0 {
		t.Fatalf("a revoke of a credit not held returns %d", ret.RemainingBytes)
	}
	if ret := a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 4, Revoke: true}); ret.RemainingBytes != 100*mib-8*mib-4*mib {
		t.Fatalf("revoke returns %d, want what is left", ret.RemainingBytes)
	}
	a.MemCredit(&pb.MemCredit{App: "vms", CreditId: 5, AddBytes: 8 * mib, MembersSet: true, Members: []*pb.MemCreditMember{{Handle: h}}})
	a.MemCreditLost()
	if id, b := a.MemCreditOf("vms"); id != 0 || b != 0 {
		t.Fatalf("credit %d/%d outlived its session", id, b)
	}
}
