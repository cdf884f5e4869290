package netns

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// dialFromInside connects from inside n to addr (bash's /dev/tcp, 2 s at
// most) and reports whether it connected.
func dialFromInside(t *testing.T, n *NS, addr string) bool {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := n.Command("timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port))
	return cmd.Run() == nil
}

func accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// A namespace reaches the host's end of its pair and nothing else; Drop
// cuts exactly the named port both ways, in the namespace's own ruleset;
// Heal lets it through again; Close leaves no namespace and no link.
func TestDropHealAndClose(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	hostRules, _ := exec.Command("nft", "list", "ruleset").CombinedOutput()
	const name, hostIf = "escra-nstest", "escra-nst0"
	n, err := Create(name, hostIf, netip.MustParsePrefix("169.254.213.0/30"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if n.HostAddr.String() != "169.254.213.1" || n.Addr.String() != "169.254.213.2" {
		t.Fatalf("addresses %v, %v", n.HostAddr, n.Addr)
	}
	cut, _ := net.Listen("tcp", n.HostAddr.String()+":0")
	open, _ := net.Listen("tcp", n.HostAddr.String()+":0")
	loop, _ := net.Listen("tcp", "127.0.0.1:0")
	for _, l := range []net.Listener{cut, open, loop} {
		defer l.Close()
		go accept(l)
	}
	if !dialFromInside(t, n, cut.Addr().String()) {
		t.Fatal("no connection from inside to the host's end")
	}
	if dialFromInside(t, n, loop.Addr().String()) {
		t.Fatal("the namespace reached the host's loopback")
	}
	port := cut.Addr().(*net.TCPAddr).Port
	if err := n.Drop(Port{"tcp", port}); err != nil {
		t.Fatal(err)
	}
	if r := n.Rules(); !strings.Contains(r, fmt.Sprintf("tcp dport %d drop", port)) || !strings.Contains(r, fmt.Sprintf("tcp sport %d drop", port)) {
		t.Fatalf("namespace rules:\n%s", r)
	}
	t0 := time.Now()
	if dialFromInside(t, n, cut.Addr().String()) {
		t.Fatal("connected through a DROP")
	}
	if time.Since(t0) < time.Second {
		t.Fatalf("the dropped connect failed after %v: refused, not dropped", time.Since(t0))
	}
	if !dialFromInside(t, n, open.Addr().String()) {
		t.Fatal("a port not named was cut too")
	}
	if now, _ := exec.Command("nft", "list", "ruleset").CombinedOutput(); string(now) != string(hostRules) {
		t.Fatalf("the host's ruleset changed:\n%s", now)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if !dialFromInside(t, n, cut.Addr().String()) {
		t.Fatal("still cut after Heal")
	}
	if err := n.Heal(); err != nil {
		t.Fatalf("second Heal: %v", err)
	}
	// The host's dialer goes over the pair (nothing listens on port 9
	// inside: refused by the namespace's stack), and only over it.
	if _, err := n.Dialer(time.Second).Dial("tcp", n.Addr.String()+":9"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial into the namespace: %v, want refused", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Dialer(time.Second).Dial("tcp", n.Addr.String()+":9"); err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("dial after Close: %v, want no such device (never the default route)", err)
	}
	if _, err := os.Stat("/sys/class/net/" + hostIf); err == nil {
		t.Fatal("veth left after Close")
	}
	// A rerun after a killed one: Create removes what is left.
	n2, err := Create(name, hostIf, netip.MustParsePrefix("169.254.213.0/30"))
	if err != nil {
		t.Fatal(err)
	}
	n3, err := Create(name, hostIf, netip.MustParsePrefix("169.254.213.0/30"))
	if err != nil {
		n2.Close()
		t.Fatalf("Create over a leftover: %v", err)
	}
	n3.Close()
}
