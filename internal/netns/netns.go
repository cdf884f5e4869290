// Package netns makes a network namespace joined to the host's by a veth
// pair, so a test or bench can run one process (escrad) in it and cut it
// off with nft DROP rules inside that namespace, never in the host's own
// ruleset (the machine's firewall is shared). Addresses are the two of a
// /30 on the pair; the namespace has no other route, so nothing in it can
// reach any address but the host's end of the pair.
//
// Needs root, iproute2 (ip), util-linux (nsenter) and nftables (nft);
// scripts/setup.sh installs them.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NS is one namespace and its veth pair.
type NS struct {
	Name     string     // ip netns name: /run/netns/NAME
	HostIf   string     // the pair's end in the host's namespace
	PeerIf   string     // the end inside the namespace
	HostAddr netip.Addr // on HostIf
	Addr     netip.Addr // on PeerIf
	bits     int
}

// Available says why the namespace cannot be made here (nil: it can).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root")
	}
	for _, t := range []string{"ip", "nsenter", "nft"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("netns: %s not installed (scripts/setup.sh installs iproute2, util-linux and nftables)", t)
		}
	}
	return nil
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Create makes namespace name with a veth pair hostIf (host side, the
// prefix's first address) and hostIf's peer (inside, the second address).
// Leftovers of the same names (a killed run) are removed first. prefix is
// a /30 (or shorter) that no other interface of the machine uses.
func Create(name, hostIf string, prefix netip.Prefix) (*NS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if len(hostIf) > 14 {
		return nil, fmt.Errorf("netns: interface name %q longer than 14 bytes", hostIf)
	}
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("netns: %v: want an IPv4 prefix of /30 or shorter", prefix)
	}
	h := prefix.Addr().Next()
	n := &NS{Name: name, HostIf: hostIf, PeerIf: hostIf + "p", HostAddr: h, Addr: h.Next(), bits: prefix.Bits()}
	Remove(name, hostIf)
	steps := [][]string{
		{"ip", "netns", "add", name},
		{"ip", "link", "add", n.HostIf, "type", "veth", "peer", "name", n.PeerIf, "netns", name},
		{"ip", "addr", "add", fmt.Sprintf("%v/%d", n.HostAddr, n.bits), "dev", n.HostIf},
		{"ip", "link", "set", n.HostIf, "up"},
		{"ip", "-n", name, "addr", "add", fmt.Sprintf("%v/%d", n.Addr, n.bits), "dev", n.PeerIf},
		{"ip", "-n", name, "link", "set", n.PeerIf, "up"},
		{"ip", "-n", name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			n.Close()
			return nil, err
		}
	}
	// The pair is up when both ends say so (carrier within milliseconds).
	for range 100 {
		if b, err := os.ReadFile("/sys/class/net/" + n.HostIf + "/operstate"); err == nil && strings.TrimSpace(string(b)) == "up" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n, nil
}

// Remove deletes namespace name and the link hostIf when they exist
// (errors ignored: nothing to remove). Deleting one end of a veth pair
// deletes both.
func Remove(name, hostIf string) {
	_ = exec.Command("ip", "link", "del", hostIf).Run()
	if _, err := os.Stat("/run/netns/" + name); err == nil {
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
}

// Close removes the namespace and its pair. Processes still inside keep
// the namespace alive (without the pair) until they exit.
func (n *NS) Close() error {
	Remove(n.Name, n.HostIf)
	if _, err := os.Stat("/run/netns/" + n.Name); err == nil {
		return fmt.Errorf("netns: %s still there", n.Name)
	}
	return nil
}

// Path is the namespace's file, for setns(2) or nsenter --net.
func (n *NS) Path() string { return "/run/netns/" + n.Name }

// Command runs name inside the namespace (network only: the mount
// namespace, so /sys/fs/cgroup and unix sockets, is the caller's). It
// goes through nsenter, which execs name in place: the pid is name's.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)...)
}

// Dialer dials from the host's namespace through HostIf only
// (SO_BINDTODEVICE): once the pair is gone a dial to the namespace's
// address fails instead of following the machine's default route out.
func (n *NS) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), n.HostIf) }); err != nil {
			return err
		}
		return serr
	}}
}

// HTTPClient reaches servers inside the namespace (a /metrics page) over
// the pair only, never through a proxy from the environment.
func (n *NS) HTTPClient(timeout time.Duration) *http.Client {
	d := n.Dialer(timeout)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// Port is a transport port on the host's end of the pair.
type Port struct {
	Proto string // "tcp" or "udp"
	Port  int
}

// table is the namespace's own nft table; the host's ruleset is never
// touched.
const table = "escra_partition"

// Drop cuts traffic between the namespace and the host's end of the pair
// on the given ports, both ways, as a pulled cable would: nft rules in a
// netdev table on the inner end (ingress and egress hooks), so packets
// vanish on the link and senders see no error (a DROP in an inet output
// chain would fail a local sender's sendmsg with EPERM, which no real
// partition does). Other traffic on the pair (a metrics scrape) flows.
func (n *NS) Drop(ports ...Port) error {
	if len(ports) == 0 {
		return errors.New("netns: Drop with no ports")
	}
	var in, out []string
	for _, p := range ports {
		if p.Proto != "tcp" && p.Proto != "udp" {
			return fmt.Errorf("netns: protocol %q", p.Proto)
		}
		in = append(in, fmt.Sprintf("\t\tip saddr %v %s sport %d drop", n.HostAddr, p.Proto, p.Port))
		out = append(out, fmt.Sprintf("\t\tip daddr %v %s dport %d drop", n.HostAddr, p.Proto, p.Port))
	}
	script := fmt.Sprintf("table netdev %[1]s {\n\tchain in {\n\t\ttype filter hook ingress device %[2]q priority 0; policy accept;\n%[3]s\n\t}\n"+
		"\tchain out {\n\t\ttype filter hook egress device %[2]q priority 0; policy accept;\n%[4]s\n\t}\n}\n",
		table, n.PeerIf, strings.Join(in, "\n"), strings.Join(out, "\n"))
	_ = n.Heal() // one set of rules at a time
	return n.nft(script)
}

// Heal removes Drop's rules (none: nothing to do).
func (n *NS) Heal() error {
	if !strings.Contains(n.Rules(), "table netdev "+table) {
		return nil
	}
	return n.nft("delete table netdev " + table + "\n")
}

// Rules is the namespace's nft ruleset (for a report or a test).
func (n *NS) Rules() string {
	b, _ := exec.Command("nsenter", "--net="+n.Path(), "--", "nft", "list", "ruleset").CombinedOutput()
	return string(b)
}

func (n *NS) nft(script string) error {
	cmd := exec.Command("nsenter", "--net="+n.Path(), "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", n.Name, err, strings.TrimSpace(string(b)))
	}
	return nil
}
