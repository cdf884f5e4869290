package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/mu/gateway"
)

// Functions are served by escra-gateway (Mu), not the controller:
// `escractl get functions` and `escractl top --gateway URL` read its
// /v1/functions.

func gatewayURL(flagVal string) string {
	u := flagVal
	if u == "" {
		u = os.Getenv("ESCRA_GATEWAY")
	}
	if u == "" {
		u = "http://127.0.0.1:8089"
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return strings.TrimSuffix(u, "/")
}

func fetchFunctions(e *env, base string) ([]gateway.Status, error) {
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, base+"/v1/functions", nil)
	if err != nil {
		return nil, fmt.Errorf("bad gateway URL %q", base)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway at %s unreachable: %v", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("gateway at %s: %s", base, resp.Status)
	}
	var body struct {
		Functions []gateway.Status `json:"functions"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("gateway at %s sent something that is not its /v1/functions JSON: %v", base, err)
	}
	return body.Functions, nil
}

func writeFunctions(e *env, fs []gateway.Status, name string, w io.Writer) error {
	t := newTable([]int{3, 4, 5, 6, 7, 8, 9, 10, 11}, "FUNCTION", "AUTOSCALER", "LB", "READY", "WANT", "CEIL", "QUEUE", "CAP/S", "RATE/S", "PRED/S", "503")
	found := false
	for _, s := range fs {
		if name != "" && s.Name != name {
			continue
		}
		found = true
		want := fmt.Sprint(s.Desired)
		if s.Capped {
			want += "!"
		}
		t.add(s.Name, s.Autoscaler, s.LB, fmt.Sprintf("%d+%d", s.Ready, s.Pending), want, fmt.Sprint(s.Ceiling), fmt.Sprint(s.Queued),
			fmt.Sprintf("%.1f", s.CapacityRPS), fmt.Sprintf("%.1f", s.RateRPS), fmt.Sprintf("%.1f", s.PredictedRPS), fmt.Sprint(s.Rejected))
	}
	if name != "" && !found {
		return &exitError{code: 1, msg: fmt.Sprintf("unknown function %q", name)}
	}
	t.write(w, e.width)
	return nil
}

func getFunctions(e *env, gw, out, name string) error {
	fs, err := fetchFunctions(e, gatewayURL(gw))
	if err != nil {
		return err
	}
	if out == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(fs)
	}
	return writeFunctions(e, fs, name, e.stdout)
}

func topFunctions(e *env, gw, name string, once bool, every time.Duration) error {
	base := gatewayURL(gw)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		fs, err := fetchFunctions(e, base)
		if err != nil {
			if e.ctx.Err() != nil {
				return nil
			}
			return err
		}
		var frame bytes.Buffer
		if err := writeFunctions(e, fs, name, &frame); err != nil {
			return err
		}
		for _, s := range fs {
			if name != "" && s.Name != name {
				continue
			}
			for _, r := range s.Replicas {
				fmt.Fprintf(&frame, "  %s/%s  %s  in flight %d  queue %d  capacity %.1f/s  sent %d\n", s.Name, r.ID, r.Addr, r.Inflight, r.Queue, r.Capacity, r.Sent)
			}
		}
		if e.tty && !once {
			io.WriteString(e.stdout, "\x1b[H\x1b[2J")
		}
		e.stdout.Write(frame.Bytes())
		if once {
			return nil
		}
		select {
		case <-e.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
