package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// --- D: host scoping and the host share, on a real engine -----------------
//
// h1 runs escrad on engine h1 with one real container of flt-scope. Two
// lying hosts hold valid certificates: "liar" is bound to no app, "liar2"
// to flt-scope. Each registers nine made-up containers and asks for memory
// for them; liar2 also claims h1's real container id. The controller runs
// --host-max-share 0.5. The real container spins one thread, so without
// the cap nine phantoms would cut it to a tenth of Ω (Escra §IV-A eq. 2).

const (
	scopeApp   = "flt-scope"
	scopeShare = 0.5
	scopeOmega = 100000 // µs: 1 core, which the real container's one spinning thread wants
)

func scopeSection() error {
	certs := filepath.Join(tmp, "scope-certs")
	for _, a := range [][]string{{"--hosts", "h1,liar2", "--apps", scopeApp}, {"--hosts", "liar"}} {
		if b, err := runOut(filepath.Join(*bin, "escractl"), append([]string{"certs", "--dir", certs}, a...)...); err != nil {
			return fmt.Errorf("escractl certs: %v: %s", err, b)
		}
	}
	c, err := startController("scope-controller", "--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "controller"),
		"--tls-key", auth.KeyPath(certs, "controller"), "--state-dir", filepath.Join(tmp, "scope-state"), "--host-max-share", fmt.Sprint(scopeShare))
	if err != nil {
		return err
	}
	admin, err := client(certs, "admin")
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"name":%q,"cpu_cores":1,"memory_bytes":%d,"sigma":0}`, scopeApp, 512<<20)
	if code, out := call(admin, "PUT", "https://"+c.admn+"/v1/apps/"+scopeApp, body); code != 200 {
		return fmt.Errorf("PUT %s: %d %s", scopeApp, code, out)
	}
	real, err := runContainerCmd(engines[0], "scope-real", scopeApp, 256<<20, scopeOmega, "-threads", "1")
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, "scope-h1")
	os.MkdirAll(dir, 0o700)
	ed, err := start("scope-escrad-h1", "", filepath.Join(*bin, "escrad"), "--docker-host", engines[0].host,
		"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", freePort()), "--controller", c.sessions, "--host-id", "h1", "--backend", "cgroupfs",
		"--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "h1"), "--tls-key", auth.KeyPath(certs, "h1"),
		"--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir)
	if err != nil {
		return err
	}
	members := func() map[string]int {
		n := map[string]int{}
		if st, ok := stateTLS(admin, c.admn); ok {
			for _, ct := range st.Containers {
				if ct.App == scopeApp {
					n[ct.HostID]++
				}
			}
		}
		return n
	}
	realQuota := func() int64 {
		st, _ := stateTLS(admin, c.admn)
		for _, ct := range st.Containers {
			if ct.HostID == "h1" {
				return ct.CPUQuotaUs
			}
		}
		return -1
	}
	if _, ok := until(30*time.Second, func() bool { return members()["h1"] == 1 }); !ok {
		return fmt.Errorf("escrad h1 never registered its container: %s", ed.tail())
	}
	// It spins: its quota stays at Ω until others take a share.
	time.Sleep(2 * time.Second)
	q0 := realQuota()
	liars := map[string]*simdaemon.Daemon{}
	for _, h := range []string{"liar", "liar2"} {
		tc, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(certs), Cert: auth.CertPath(certs, h), Key: auth.KeyPath(certs, h)}, "")
		if err != nil {
			return err
		}
		d, err := simdaemon.DialTLS(c.sessions, h, 4, 8<<30, tc)
		if err != nil {
			return fmt.Errorf("%s: %w", h, err)
		}
		defer d.Close()
		liars[h] = d
		for i := range uint32(9) {
			d.RegisterAs(i+1, fmt.Sprintf("%s-phantom-%d", h, i+1), scopeApp, -1, 0, 10<<20)
		}
	}
	liars["liar2"].RegisterAs(10, real.id, scopeApp, -1, 0, 10<<20) // h1's real container
	until(3*time.Second, func() bool { return members()["liar2"] >= 9 })
	time.Sleep(500 * time.Millisecond) // the refused ones had their chance too
	grants := map[string]int{}
	for h, d := range liars {
		for range 5 {
			for i := range uint32(9) {
				if v, _, err := d.OOM(i+1, 10<<20, 10<<20, (64<<20)/4096, time.Second); err == nil && v.GetGranted() {
					grants[h]++
				}
			}
		}
	}
	n := members()
	var liar2Mem int64
	st, _ := stateTLS(admin, c.admn)
	for _, ct := range st.Containers {
		if ct.HostID == "liar2" {
			liar2Mem += ct.MemoryLimitBytes
		}
	}
	q := realQuota()
	floors := int64(9 * 2000) // the phantoms' CPU floors (allocator/hostshare.go)
	var liar2Q int64
	for _, ct := range st.Containers {
		if ct.HostID == "liar2" {
			liar2Q += ct.CPUQuotaUs
		}
	}
	summary["phantom_member_refused"] = b2i(n["liar"] == 0 && n["liar2"] == 9)
	// Kept: not cut below what it had or below the share the others may
	// not take, whichever is less (on a busy machine the spinning thread
	// may get less than Ω, and its quota follows its use, Escra §IV-D-1).
	summary["real_member_quota_kept"] = b2i(q > 0 && q >= min(q0, int64((1-scopeShare)*scopeOmega)-floors) &&
		liar2Q <= int64(scopeShare*scopeOmega)+floors)
	summary["phantom_oom_grants"] = grants["liar"]
	summary["bound_liar_mem_within_share"] = b2i(liar2Mem <= int64(scopeShare*512<<20))
	say("scope: members unbound liar %d, bound liar %d (9 made up, 1 borrowed id), real %d; real quota %d → %d µs of %d, bound liar's %d; OOM grants unbound %d, bound %d (%d MiB held, share %g of 512)",
		n["liar"], n["liar2"], n["h1"], q0, q, scopeOmega, liar2Q, grants["liar"], grants["liar2"], liar2Mem>>20, scopeShare)
	ed.kill()
	return nil
}
