package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/moby/moby/client"
)

// BusyboxImage imports Debian's static busybox (busybox-static) as an
// image whose entrypoint is /bin/sh -c, once per busybox build; tests
// that look at a container from inside (nproc, /proc, /sys) use it.
func BusyboxImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	ref, err := ImportBusybox(context.Background(), cli)
	if err != nil {
		t.Skipf("busybox image: %v (scripts/setup.sh installs busybox-static)", err)
	}
	return ref
}

// ImportBusybox is BusyboxImage without a testing.TB.
func ImportBusybox(ctx context.Context, cli *client.Client) (string, error) {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	ref := "wys-busybox:" + hex.EncodeToString(sum[:6])
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "proc/", "sys/", "dev/", "etc/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return "", err
	}
	if _, err := tw.Write(bin); err != nil {
		return "", err
	}
	for _, l := range []string{"sh", "cat", "nproc", "grep", "sleep", "wc", "seq", "getconf", "head"} {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + l, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`ENTRYPOINT ["/bin/sh", "-c"]`}})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", ref, err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("import %s: %w", ref, err)
	}
	return ref, nil
}
