package main

import (
	"fmt"

	"github.com/escra-dev/escra/internal/workloadimages"
)

var busyboxLinks = []string{"sh", "nproc", "sed", "cat", "sleep", "grep", "wc"}

func fillBusybox(r *workloadimages.Rootfs) error {
	if err := r.HostFile("/bin/busybox", "/bin/busybox"); err != nil {
		return fmt.Errorf("busybox (Debian busybox-static): %w", err)
	}
	for _, l := range busyboxLinks {
		r.Symlink("/bin/"+l, "busybox")
	}
	r.Dir("/tmp", 0o1777)
	r.File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n"))
	r.File("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	return nil
}

// nginxAuto is Debian's nginx with worker_processes auto: nginx counts
// sysconf(_SC_NPROCESSORS_ONLN), which glibc reads from
// /sys/devices/system/cpu/online.
var nginxAuto = workloadimages.Spec{
	Name: "wys-nginx",
	Fill: func(_ string, r *workloadimages.Rootfs) error {
		if err := r.HostBinary("/usr/sbin/nginx"); err != nil {
			return fmt.Errorf("nginx (Debian nginx-light): %w", err)
		}
		if err := fillBusybox(r); err != nil {
			return err
		}
		r.Dir("/var/log/nginx", 0o755)
		r.Dir("/var/lib/nginx", 0o755)
		for p, n := range workloadimages.NginxFiles {
			r.File(p, 0o644, workloadimages.CompressibleText(n, int64(n)))
		}
		r.File("/etc/wys-nginx.conf.in", 0o644, []byte(nginxConf))
		return nil
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c", "sed s/@PORT@/$PORT/ /etc/wys-nginx.conf.in > /tmp/nginx.conf && exec /usr/sbin/nginx -e stderr -c /tmp/nginx.conf"]`},
}

// reuseport gives each worker its own listening socket and spreads
// connections over them: without it one worker often accepts all of
// wrk's connections at once, and the quota arm is a single-threaded
// program like the WYSIWYG arm (docs/wysiwyg.md, runs 6 and 7).
const nginxConf = `worker_processes auto;
daemon off;
master_process on;
user root;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    default_type text/plain;
    types { text/plain txt; }
    client_body_temp_path /tmp/nginx-body;
    proxy_temp_path /tmp/nginx-proxy;
    fastcgi_temp_path /tmp/nginx-fastcgi;
    uwsgi_temp_path /tmp/nginx-uwsgi;
    scgi_temp_path /tmp/nginx-scgi;
    keepalive_requests 100000;
    gzip on;
    gzip_comp_level 9;
    gzip_min_length 1;
    gzip_types text/plain;
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        root /srv/www;
    }
}
`

// goworkImg is a Go program with the runtime's defaults (workloads/gowork).
var goworkImg = workloadimages.Spec{
	Name: "wys-gowork",
	Fill: func(repo string, r *workloadimages.Rootfs) error {
		b, err := workloadimages.GoBinary(repo, "workloads/gowork")
		if err != nil {
			return err
		}
		r.File("/gowork", 0o755, b)
		return fillBusybox(r)
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c"]`},
}

var sysbenchImg = workloadimages.Spec{
	Name: "wys-sysbench",
	Fill: func(_ string, r *workloadimages.Rootfs) error {
		if err := r.HostBinary("/usr/bin/sysbench"); err != nil {
			return fmt.Errorf("sysbench (Debian sysbench): %w", err)
		}
		return fillBusybox(r)
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c"]`},
}
