package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// --- G: a deposed leader's actions -----------------------------------------
//
// Two controllers on a real etcd (--leader-ttl 2s), two real escrads (one
// per engine, given both controllers, the leader first) with a container
// spinning two threads each in a 1-core app, so the leader keeps moving
// their quotas. Each round the leader is SIGSTOPped until the follower
// leads (its lease expired at etcd), then SIGCONTed at once: before the
// escrads' 3 s dead-session timer, so it wakes with its sessions open and
// decisions due on the telemetry queued meanwhile. Every 20 ms the bench
// reads each escrad's term and its controller actions carried out.
//
// deposed_leader_actions_applied is escrad's own count of actions carried
// out with a term below the highest it had seen (escrad_stale_term_applied_total),
// summed over the escrads and rounds; deposed_old_term_refused what they refused
// for it. deposed_actions_after_election counts the actions an escrad
// carried out between two samples where it was still on the old term
// although the new leader was already answering (a deposed leader acting
// on a daemon that has not met its successor yet); _max adds the sample
// intervals in which the escrad moved to the new term.

const deposedRounds = 3

type escradView struct {
	term, actions, staleApplied, staleRefused float64
}

// readEscrad reads the four series from one scrape, so a sample's term
// and actions go together.
func readEscrad(addr string) escradView {
	var v escradView
	resp, err := plain.Get("http://" + addr + "/metrics")
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		x, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "escrad_controller_term":
			v.term = x
		case "escrad_controller_actions_total":
			v.actions = x
		case "escrad_stale_term_applied_total":
			v.staleApplied = x
		case "escrad_stale_term_refused_total":
			v.staleRefused = x
		}
	}
	return v
}

func deposedSection() error {
	ep, err := startEtcd()
	if err != nil {
		return err
	}
	args := []string{"--insecure", "--insecure-store", "--store", "etcd://" + ep, "--leader-ttl", "2s", "--reclaim-every", "1s"}
	var ctls [2]*ctl
	if ctls[0], err = startController("deposed-controller-a", args...); err != nil {
		return err
	}
	if _, ok := until(10*time.Second, func() bool { _, ok := getState(ctls[0].admn); return ok }); !ok {
		return errors.New("controller a never led")
	}
	if ctls[1], err = startController("deposed-controller-b", args...); err != nil {
		return err
	}
	body := `{"name":"flt-deposed","cpu_cores":1,"memory_bytes":536870912,"sigma":0.25}`
	if code, out := call(plain, "PUT", "http://"+ctls[0].admn+"/v1/apps/flt-deposed", body); code != 200 {
		return fmt.Errorf("PUT on the leader: %d %s", code, out)
	}
	var metrics [2]string
	for i, e := range engines[:2] {
		if _, err := runContainerCmd(e, fmt.Sprintf("deposed%d", i+1), "flt-deposed", 256<<20, 100000, "-threads", "2"); err != nil {
			return err
		}
		dir := filepath.Join(tmp, fmt.Sprintf("deposed-h%d", i+1))
		os.MkdirAll(dir, 0o700)
		metrics[i] = fmt.Sprintf("127.0.0.1:%d", freePort())
		if _, err := start(fmt.Sprintf("deposed-escrad-h%d", i+1), "", filepath.Join(*bin, "escrad"), "--docker-host", e.host, "--insecure",
			"--controller", ctls[0].sessions+","+ctls[1].sessions, "--host-id", fmt.Sprintf("h%d", i+1), "--metrics-listen", metrics[i],
			"--no-oom-guard", "--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir, "--backend", "cgroupfs"); err != nil {
			return err
		}
	}
	if _, ok := until(30*time.Second, func() bool { return haContainers(ctls[0].admn, 2) }); !ok {
		return errors.New("the escrads' containers never joined on the leader")
	}
	var first [2]escradView
	for i := range metrics {
		first[i] = readEscrad(metrics[i])
	}
	leader := 0
	after, afterMax := 0.0, 0.0
	var pauses []string
	for round := range deposedRounds {
		time.Sleep(3 * time.Second) // steady control by the leader
		old, next := ctls[leader], ctls[1-leader]
		var before [2]escradView
		for i := range metrics {
			before[i] = readEscrad(metrics[i])
		}
		oldTerm := before[0].term
		// Sample the escrads from before the stop until both are on the new term.
		var mu sync.Mutex
		var elected time.Time
		samples := [2][]escradView{}
		stamps := [2][]time.Time{}
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i := range metrics {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					v, at := readEscrad(metrics[i]), time.Now()
					mu.Lock()
					samples[i], stamps[i] = append(samples[i], v), append(stamps[i], at)
					mu.Unlock()
					select {
					case <-done:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
		}
		t0 := time.Now()
		if err := old.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			close(done)
			return err
		}
		took, ok := until(15*time.Second, func() bool { _, ok := getState(next.admn); return ok })
		mu.Lock()
		elected = time.Now()
		mu.Unlock()
		old.p.cmd.Process.Signal(syscall.SIGCONT)
		if !ok {
			close(done)
			wg.Wait()
			return fmt.Errorf("round %d: the follower never led", round+1)
		}
		pauses = append(pauses, fmt.Sprintf("%.2f s", took.Seconds()))
		moved, ok := until(20*time.Second, func() bool {
			return readEscrad(metrics[0]).term > oldTerm && readEscrad(metrics[1]).term > oldTerm && haContainers(next.admn, 2)
		})
		time.Sleep(500 * time.Millisecond)
		close(done)
		wg.Wait()
		if !ok {
			return fmt.Errorf("round %d: the escrads never moved to the new leader", round+1)
		}
		for i := range metrics {
			vs, ts := samples[i], stamps[i]
			for k := 1; k < len(vs); k++ {
				if ts[k-1].Before(elected) || vs[k-1].term != oldTerm {
					continue
				}
				d := vs[k].actions - vs[k-1].actions
				afterMax += d
				if vs[k].term == oldTerm {
					after += d
				}
			}
		}
		say("deposed round %d: leader (term %.0f) SIGSTOPped, the follower led %.2f s later and the old one was SIGCONTed; both escrads on the new leader %.2f s after that (%.2f s from the stop)",
			round+1, oldTerm, took.Seconds(), moved.Seconds(), time.Since(t0).Seconds())
		leader = 1 - leader
	}
	applied, refused := 0.0, 0.0
	for i := range metrics {
		v := readEscrad(metrics[i])
		applied += v.staleApplied - first[i].staleApplied
		refused += v.staleRefused - first[i].staleRefused
	}
	summary["deposed_leader_actions_applied"] = applied
	summary["deposed_old_term_refused"] = refused
	summary["deposed_actions_after_election"] = after
	summary["deposed_actions_after_election_max"] = afterMax
	summary["deposed_rounds"] = deposedRounds
	say("deposed: %d rounds (follower led after %s); old-term actions carried out after the new term was seen: %.0f; refused for their term: %.0f; carried out from the old leader while its successor already led: %.0f (at most %.0f)",
		deposedRounds, strings.Join(pauses, ", "), applied, refused, after, afterMax)
	return nil
}
