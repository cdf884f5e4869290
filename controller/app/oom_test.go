package app

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// ackHost acks every update from another goroutine, as a session does,
// and hands verdicts to a channel.
type ackHost struct{ verdicts chan *pb.OomVerdict }

func (h *ackHost) Push(u session.Update) {
	go u.Done(nil)
}
func (h *ackHost) Queue(u session.Update) { h.Push(u) }
func (h *ackHost) Wake()                  {}
func (h *ackHost) Reclaim(_ []uint32, _ uint64, cb func(*pb.ReclaimResult, error)) {
	go cb(&pb.ReclaimResult{}, nil)
}
func (h *ackHost) Verdict(_ uint64, v *pb.OomVerdict, _ time.Time) { h.verdicts <- v }
func (h *ackHost) Lease(*pb.CpuLease)                              {}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A grant leaves one info line naming the container, its app, the bytes
// granted and the time to grant.
func TestOOMGrantIsLoggedAtInfo(t *testing.T) {
	var buf lockedBuf
	c := &counts{bad: map[string]int{}}
	s, err := New("shop", allocator.Budget{CPUCores: 1, MemoryBytes: 1 << 30, Sigma: 0.5}, allocator.DefaultParams(), nil, false,
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), &events.Hub{}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	h := &ackHost{verdicts: make(chan *pb.OomVerdict, 1)}
	if err := s.Join(MemberInfo{Key: 1, Host: h, HostID: "h1", Handle: 3, ContainerID: "0123456789abcdef", Name: "web-0",
		HostMaxUs: 100000}); err != nil {
		t.Fatal(err)
	}
	limit := s.Snapshot().Members[0].MemLimit
	s.OOM(1, 9, &pb.OomRequest{Handle: 3, UsageBytes: uint64(limit), LimitBytes: uint64(limit)}, time.Now())
	var v *pb.OomVerdict
	select {
	case v = <-h.verdicts:
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict")
	}
	if !v.Granted {
		t.Fatalf("verdict %v, want a grant", v)
	}
	// The line is written once the verdict has left, so it may follow
	// the verdict by a moment.
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); len(lines) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		for _, ln := range strings.Split(buf.String(), "\n") {
			if strings.Contains(ln, "OOM granted") {
				lines = append(lines, ln)
			}
		}
	}
	if len(lines) != 1 {
		t.Fatalf("log %q: want one OOM granted line", buf.String())
	}
	for _, want := range []string{"level=INFO", "app=shop", "name=web-0", "host=h1", "container=0123456789ab",
		"granted_bytes=" + strconv.FormatInt(v.NewLimitBytes-limit, 10), "time_to_grant="} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("grant line %q lacks %q", lines[0], want)
		}
	}
}
