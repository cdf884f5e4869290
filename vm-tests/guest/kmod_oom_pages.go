package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioKmodOOMPages: the pages escra.ko's held charge wants reach the
// controller as OomRequest.pages_wanted, and each grant covers them. The
// app's OOM step is one page, so a grant larger than a page can only come
// from pages_wanted (the allocator grants max(step, pages wanted)). The
// session runs through a tap that forwards it byte for byte and decodes
// the requests and verdicts on the way.
func scenarioKmodOOMPages(*harness.Env) error {
	// Verdict deadlines sized for a TCG guest on a busy host, as escrad-e2e.
	restore, err := harness.SetOOMTimeout(2000)
	if err != nil {
		return err
	}
	defer restore()
	memCg, err := harness.NewCgroup("pages-mem")
	if err != nil {
		return err
	}
	defer memCg.Remove()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const page = 4096
	srv, err := harness.StartControllerNoCredit(ctx, page, server.AppSpec{Name: "vmapp", CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.5})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	tap, err := newOOMTap(srv.TCPAddr())
	if err != nil {
		return err
	}
	defer tap.close()
	esc, err := harness.StartEscrad(ctx, tap.addr(), time.Second,
		containers.CgroupSpec{Name: "pages-mem", App: "vmapp", Path: "/pages-mem"})
	if err != nil {
		return err
	}
	defer esc.Stop()

	mb, err := harness.Registered(srv, "pages-mem", memCg)
	if err != nil {
		return err
	}
	boot := mb.MemoryLimitBytes
	// 2 MiB over the bootstrap limit: hundreds of one-page grants at most.
	want := boot>>20 + 2
	mem, err := memCg.Start("hog-mem", strconv.FormatInt(want, 10))
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(mem, 120*time.Second)
	if err != nil {
		return fmt.Errorf("memory hog: %w", err)
	}
	kills, err := memCg.Keyed("memory.events", "oom_kill")
	if err != nil {
		return err
	}
	m, _ := harness.Member(srv, "pages-mem")
	seen := tap.results()
	if !ps.Success() || kills != 0 || m.OOMGrants == 0 || len(seen) == 0 {
		return fmt.Errorf("memory hog of %d MiB over a %d MiB bootstrap limit: %v, oom_kill %d, controller grants %d (requests %d), %d verdicts seen: want exit 0, no kill, >= 1 grant",
			want, boot>>20, ps, kills, m.OOMGrants, m.OOMRequests, len(seen))
	}
	var pages, granted uint64
	for _, r := range seen {
		if r.pages == 0 {
			return fmt.Errorf("OOM request without pages_wanted (limit %d): escrad dropped the kernel's nr_pages", r.limit)
		}
		pages += r.pages
		if !r.granted {
			continue
		}
		granted++
		if rose := r.newLimit - int64(r.limit); rose < int64(r.pages)*page {
			return fmt.Errorf("grant raised the limit by %d bytes for a charge of %d pages: want >= %d", rose, r.pages, r.pages*page)
		}
	}
	if granted == 0 {
		return fmt.Errorf("no granted verdict among %d seen", len(seen))
	}
	fmt.Printf("    pages-mem %d MiB -> %d MiB: %d OOM requests (%.1f pages wanted on average), %d grants each >= its pages; hog exit 0, no kill\n",
		boot>>20, m.MemoryLimitBytes>>20, len(seen), float64(pages)/float64(len(seen)), granted)
	return esc.Early()
}

// tapResult is one OOM request and its verdict as they crossed the tap.
type tapResult struct {
	pages, limit uint64
	granted      bool
	newLimit     int64
}

// oomTap is escrad's controller address: it forwards each session to the
// controller unchanged and decodes both directions from a copy.
type oomTap struct {
	ln   net.Listener
	ctrl string

	mu   sync.Mutex
	reqs map[uint64]tapResult // requests by envelope request id, this session
	done []tapResult
}

func newOOMTap(ctrl string) (*oomTap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &oomTap{ln: ln, ctrl: ctrl, reqs: map[uint64]tapResult{}}
	go t.accept()
	return t, nil
}

func (t *oomTap) addr() string { return t.ln.Addr().String() }
func (t *oomTap) close()       { _ = t.ln.Close() }

func (t *oomTap) results() []tapResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]tapResult(nil), t.done...)
}

func (t *oomTap) accept() {
	for {
		d, err := t.ln.Accept()
		if err != nil {
			return
		}
		c, err := net.Dial("tcp", t.ctrl)
		if err != nil {
			_ = d.Close()
			continue
		}
		t.mu.Lock()
		clear(t.reqs) // request ids are per session
		t.mu.Unlock()
		go t.pipe(d, c, t.fromDaemon)
		go t.pipe(c, d, t.fromController)
	}
}

// pipe copies src to dst and hands a copy of the stream to decode.
func (t *oomTap) pipe(src, dst net.Conn, decode func(*pb.Envelope)) {
	pr, pw := io.Pipe()
	go func() {
		er := wire.NewEnvelopeReader(pr)
		var env pb.Envelope
		for er.Read(&env) == nil {
			decode(&env)
		}
		_, _ = io.Copy(io.Discard, pr) // never block the copy below
	}()
	_, _ = io.Copy(io.MultiWriter(dst, pw), src)
	_ = pw.Close()
	_ = src.Close()
	_ = dst.Close()
}

func (t *oomTap) fromDaemon(env *pb.Envelope) {
	if r := env.GetOomRequest(); r != nil {
		t.mu.Lock()
		t.reqs[env.RequestId] = tapResult{pages: r.PagesWanted, limit: r.LimitBytes}
		t.mu.Unlock()
	}
}

func (t *oomTap) fromController(env *pb.Envelope) {
	v := env.GetOomVerdict()
	if v == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.reqs[env.RequestId]
	if !ok {
		return
	}
	delete(t.reqs, env.RequestId)
	r.granted, r.newLimit = v.Granted, v.NewLimitBytes
	t.done = append(t.done, r)
}
