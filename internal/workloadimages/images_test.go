package workloadimages

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	libs, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if fmt.Sprint(libs) != fmt.Sprint(want) {
		t.Errorf("libs %v, want %v", libs, want)
	}
	if _, err := parseLdd("\tlibfoo.so.1 => not found\n"); err == nil {
		t.Error("missing library accepted")
	}
}

func TestTarIsDeterministic(t *testing.T) {
	mk := func() []byte {
		r := NewRootfs()
		r.File("/b/x", 0o644, []byte("x"))
		r.File("/a", 0o755, []byte("a"))
		r.Symlink("/lib64", "lib")
		b, err := r.Tar()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, second := mk(), mk()
	if string(first) != string(second) {
		t.Error("same tree gave different tar bytes")
	}
}

func docker(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatalf("docker engine: %v (scripts/setup.sh starts it)", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freePort picks a free loopback TCP port (containers use --network host).
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts a container of tag with host networking and removes it on cleanup.
func run(t *testing.T, cli *client.Client, tag string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("escra-test-img-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: tag, Cmd: cmd, Labels: map[string]string{"escra.test": "bench-images"}},
		HostConfig: &container.HostConfig{NetworkMode: "host"}, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func logs(cli *client.Client, id string) string {
	rc, err := cli.ContainerLogs(context.Background(), id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// waitHTTP polls url until it answers 200 or the container dies.
func waitHTTP(t *testing.T, cli *client.Client, id, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never answered; container logs:\n%s", url, logs(cli, id))
}

func TestImagesRunOnTheRealEngine(t *testing.T) {
	cli := docker(t)
	root, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := &Builder{Docker: cli, RepoRoot: root, Log: func(s string) { t.Log(s) }}
	tags, err := b.BuildAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Building again finds the same content hash and imports nothing.
	again, err := b.Build(ctx, DemoHTTP)
	if err != nil || again != tags[DemoHTTP.Name] {
		t.Errorf("rebuild gave %q (%v), first build %q", again, err, tags[DemoHTTP.Name])
	}

	t.Run("demo-http", func(t *testing.T) {
		port := freePort(t)
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		id := run(t, cli, tags[DemoHTTP.Name], "-listen", fmt.Sprintf("127.0.0.1:%d", port))
		waitHTTP(t, cli, id, base+"/healthz")
		for _, p := range []string{"/cpu?ms=5", "/mem?mib=8&hold=10"} {
			resp, err := http.Get(base + p)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(body) == 0 {
				t.Errorf("%s: %d %q", p, resp.StatusCode, body)
			}
		}
		if resp, err := http.Get(base + "/cpu?ms=-1"); err != nil || resp.StatusCode != 400 {
			t.Errorf("bad parameter not refused: %v %v", resp, err)
		}
	})

	t.Run("nginx-gzip", func(t *testing.T) {
		port := freePort(t)
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		id := run(t, cli, tags[Nginx.Name], "-listen", fmt.Sprintf("127.0.0.1:%d", port))
		waitHTTP(t, cli, id, base+"/healthz")
		req, _ := http.NewRequest("GET", base+"/1m.txt", nil)
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: Go then leaves the body compressed
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("no gzip: %v", resp.Header)
		}
		raw, _ := io.ReadAll(resp.Body)
		zr, err := gzip.NewReader(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if string(plain) != string(CompressibleText(1<<20, 1<<20)) {
			t.Errorf("gunzipped body (%d bytes) is not the 1 MiB file", len(plain))
		}
		if len(raw) > len(plain)/2 {
			t.Errorf("compressed %d of %d bytes: text not compressible enough", len(raw), len(plain))
		}
	})

	t.Run("redis-ping", func(t *testing.T) {
		port := freePort(t)
		id := run(t, cli, tags[Redis.Name], "--port", fmt.Sprint(port))
		var conn net.Conn
		deadline := time.Now().Add(20 * time.Second)
		for conn == nil {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				conn = c
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis never listened; logs:\n%s", logs(cli, id))
			}
			time.Sleep(100 * time.Millisecond)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		// RESP: an array of one bulk string.
		if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "+PONG\r\n" {
			t.Errorf("PING answered %q (%v)", line, err)
		}
	})

	t.Run("memwave", func(t *testing.T) {
		id := run(t, cli, tags[Memwave.Name], "-min", "8", "-max", "64", "-period", "2s")
		// Half a period in, the working set is near its 64 MiB top.
		var peak uint64
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && peak < 40<<20 {
			time.Sleep(300 * time.Millisecond)
			st, err := cli.ContainerStats(context.Background(), id, client.ContainerStatsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var s container.StatsResponse
			err = json.NewDecoder(st.Body).Decode(&s)
			st.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			peak = max(peak, s.MemoryStats.Usage)
		}
		if peak < 40<<20 {
			t.Errorf("memwave cgroup usage peaked at %d MiB, want ≥ 40; logs:\n%s", peak>>20, logs(cli, id))
		}
		if !strings.Contains(logs(cli, id), "working_set_mib") {
			t.Errorf("no progress in logs:\n%s", logs(cli, id))
		}
	})
}
