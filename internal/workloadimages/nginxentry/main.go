// Command nginxentry is the entrypoint of the benchmark's nginx image: it
// writes an nginx.conf listening on the -listen address and execs nginx in
// the foreground. nginx cannot take a listen address from its command line,
// and the image has no shell.
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
)

// gzip at level 9 of multi-MiB text makes every request CPU-bound.
const conf = `worker_processes %d;
daemon off;
master_process on;
user root;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    default_type text/plain;
    types { text/plain txt; text/html html; }
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
        listen %s;
        root /srv/www;
        location = /healthz { return 200 "ok\n"; }
    }
}
`

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address nginx listens on")
	workers := flag.Int("workers", 2, "nginx worker processes")
	flag.Parse()
	if *workers < 1 {
		fmt.Fprintln(os.Stderr, "nginxentry: -workers must be ≥ 1")
		os.Exit(2)
	}
	if err := os.WriteFile("/tmp/nginx.conf", []byte(fmt.Sprintf(conf, *workers, *listen)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "nginxentry:", err)
		os.Exit(1)
	}
	err := syscall.Exec("/usr/sbin/nginx", []string{"nginx", "-e", "stderr", "-c", "/tmp/nginx.conf"}, os.Environ())
	fmt.Fprintln(os.Stderr, "nginxentry: exec nginx:", err)
	os.Exit(1)
}
