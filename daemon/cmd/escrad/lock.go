package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// defaultLockDir holds one lock file per Docker engine.
const defaultLockDir = "/run/escra"

// engineKey names the engine escrad manages the way every escrad on this
// machine would: --docker-host, else $DOCKER_HOST, else the standard
// socket; a unix socket by its real path, so /var/run and /run agree.
func engineKey(dockerHost string, noDocker bool, hostID string) string {
	if noDocker {
		return "no-docker:" + hostID
	}
	h := dockerHost
	if h == "" {
		h = os.Getenv("DOCKER_HOST")
	}
	if h == "" {
		h = "unix:///var/run/docker.sock"
	}
	if p, ok := strings.CutPrefix(h, "unix://"); ok {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		} else if r, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			p = filepath.Join(r, filepath.Base(p))
		}
		h = "unix://" + p
	}
	return h
}

// engineLock holds dir/escrad-HASH.lock with flock(LOCK_EX) for the life of
// the process (the kernel drops it when the process dies, SIGKILL too).
type engineLock struct{ f *os.File }

// errEngineTaken says another live escrad manages the engine.
var errEngineTaken = errors.New("engine already managed")

// lockEngine takes the engine's lock without waiting. When another process
// holds it the error names that escrad's pid and the engine, and nothing
// has been written.
func lockEngine(dir, key string) (*engineLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock directory: %w", err)
	}
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(dir, "escrad-"+hex.EncodeToString(sum[:8])+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.Fields(string(b) + " x")[0]); perr == nil {
				holder = "escrad pid " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s already manages engine %s (lock %s); this escrad exits without touching anything",
				errEngineTaken, holder, key, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Who holds it, for the refusal message of the next one.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+key+"\n"), 0)
	}
	return &engineLock{f: f}, nil
}

// Close releases the lock.
func (l *engineLock) Close() { l.f.Close() }
