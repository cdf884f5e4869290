package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LoadModule loads escra.ko from path with the given parameters.
func LoadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil {
		return fmt.Errorf("finit_module %s %q: %w", path, params, err)
	}
	return nil
}

// UnloadModule removes escra.ko without waiting for its users.
func UnloadModule() error {
	if err := unix.DeleteModule("escra", unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("delete_module escra: %w", err)
	}
	return nil
}

// ModuleLoaded reports whether escra.ko is loaded.
func ModuleLoaded() bool {
	_, err := os.Stat("/sys/module/escra")
	return err == nil
}

// SetOOMTimeout sets escra.ko's oom_timeout_ms and returns the restore.
// Scenarios about grants and denials use a generous value so that a busy
// shared host cannot turn them into timeouts; oom-timeout keeps 100 ms.
func SetOOMTimeout(ms int) (restore func(), err error) {
	const param = "/sys/module/escra/parameters/oom_timeout_ms"
	old := ReadProc(param)
	if err := os.WriteFile(param, []byte(strconv.Itoa(ms)), 0o644); err != nil {
		return nil, err
	}
	return func() { _ = os.WriteFile(param, []byte(old), 0o644) }, nil
}

// Dmesg returns the kernel log buffer.
func Dmesg() (string, error) {
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	m, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:m]), nil
}

// splats are the kernel log markers of a bug; any of them fails a run. A
// bare "Call Trace" is not one: OOM-kill reports (expected here) dump stacks.
var splats = []string{"WARNING:", "BUG:", "KASAN", "Oops", "general protection fault", "cut here", "refcount_t:", "list_add corruption", "list_del corruption", "allocation failed"}

// FindSplat returns the first kernel log line that marks a bug, or "".
func FindSplat(log string) string {
	for _, line := range strings.Split(log, "\n") {
		for _, s := range splats {
			if strings.Contains(line, s) {
				return line
			}
		}
	}
	return ""
}

// PrintOOMReport prints the kernel's last OOM-killer report (who charged
// what, from where), for a scenario that did not expect the kill.
func PrintOOMReport() {
	log, err := Dmesg()
	if err != nil {
		return
	}
	i := strings.LastIndex(log, "invoked oom-killer")
	if i < 0 {
		return
	}
	if j := strings.LastIndex(log[:i], "\n"); j >= 0 {
		i = j + 1
	}
	lines := strings.Split(log[i:], "\n")
	if len(lines) > 60 {
		lines = lines[:60]
	}
	for _, l := range lines {
		fmt.Println("    dmesg:", l)
	}
}
