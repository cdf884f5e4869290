package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// WaitTimeout waits for cmd; on timeout it kills it and reports so.
func WaitTimeout(cmd *exec.Cmd, d time.Duration) (*os.ProcessState, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState, nil
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return cmd.ProcessState, fmt.Errorf("still running after %v", d)
	}
}

// KilledBy reports whether the process died of sig.
func KilledBy(ps *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// ReadProc reads a /proc or /sys file, trimmed ("" when unreadable).
func ReadProc(path string) string {
	b, _ := os.ReadFile(path)
	return string(bytes.TrimSpace(b))
}

// Must drops the error of a read that is only printed.
func Must(s string, _ error) string { return s }
