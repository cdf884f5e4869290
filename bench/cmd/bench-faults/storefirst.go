package main

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// --- E: a write the store refuses is not applied ---------------------------
//
// A controller on etcd defines flt-store with 1 core; etcd is stopped
// (SIGSTOP: no quorum, the write neither commits nor fails at once) and a
// PUT asks for 8. While it waits, and after it failed, the running app is
// sampled every 20 ms: applied_without_store counts the samples with 8
// cores in effect while the store holds 1. etcd is resumed once the PUT
// has failed.

func storeFirstSection() error {
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return errors.New("etcd not installed (scripts/setup.sh installs etcd-server)")
	}
	cp, pp := freePort(), freePort()
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	e, err := start("store-etcd", "ready to serve client requests", etcd, "--name", "store", "--data-dir", filepath.Join(tmp, "store-etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster", "store="+peer)
	if err != nil {
		return err
	}
	if _, err := e.wait(20 * time.Second); err != nil {
		return err
	}
	defer e.cmd.Process.Signal(syscall.SIGCONT) // before cleanup's kill
	c, err := startController("store-controller", "--insecure", "--insecure-store", "--store", fmt.Sprintf("etcd://127.0.0.1:%d", cp), "--leader-ttl", "2s")
	if err != nil {
		return err
	}
	cores := func() float64 {
		st, ok := getState(c.admn)
		if !ok {
			return -1
		}
		for _, a := range st.Apps {
			if a.Name == "flt-store" {
				return a.CPUCores
			}
		}
		return 0
	}
	// Longer than the controller's 5 s store timeout: its answer is seen.
	slow := &http.Client{Timeout: 15 * time.Second}
	put := func(n int) (int, []byte) {
		return call(slow, "PUT", "http://"+c.admn+"/v1/apps/flt-store", fmt.Sprintf(`{"name":"flt-store","cpu_cores":%d,"memory_bytes":268435456,"sigma":0}`, n))
	}
	if _, ok := until(15*time.Second, func() bool { code, _ := put(1); return code == 200 }); !ok {
		return errors.New("the controller never took the first PUT")
	}
	if err := e.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	done := make(chan int, 1)
	var out []byte
	go func() { code, b := put(8); out = b; done <- code }()
	applied, samples := 0, 0
	code, answered := 0, false
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cores() == 8 {
			applied++
		}
		samples++
		if !answered {
			select {
			case code = <-done:
				answered = true
				end = time.Now().Add(500 * time.Millisecond) // a little after the failure too
			default:
			}
		}
	}
	e.cmd.Process.Signal(syscall.SIGCONT)
	if !answered {
		code = <-done
	}
	_, back := until(15*time.Second, func() bool { return cores() == 1 })
	summary["applied_without_store"] = applied
	summary["store_refused_put_status"] = code
	say("store refusing (etcd stopped): PUT 8 cores answered %d (%.80q); 8 cores in effect in %d of %d samples; after etcd is back the app runs the stored 1 core: %v",
		code, strings.TrimSpace(string(out)), applied, samples, back)
	return nil
}
