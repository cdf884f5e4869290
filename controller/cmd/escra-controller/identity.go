package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// tlsReloadFlags are the flags of the reloadable TLS files
// (docs/security.md, "Identities").
func tlsReloadFlags(fs *flag.FlagSet) (deny *string, every *time.Duration) {
	deny = fs.String("tls-deny", "", "file of certificate serials to refuse, one hex serial a line (# comments); reloaded with the certificates")
	every = fs.Duration("tls-reload-every", 10*time.Second, "how often the TLS files (--tls-ca, --tls-cert, --tls-key, --tls-deny) are checked for changes and reloaded; SIGHUP reloads at once (0: on SIGHUP only)")
	return deny, every
}

// watchIdentity reloads id on SIGHUP and when its files change, until ctx
// ends; new handshakes use the new files, open sessions keep theirs.
func watchIdentity(ctx context.Context, id *auth.Identity, every time.Duration, log *slog.Logger) {
	if id == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		id.Watch(ctx, every, hup, log)
	}()
}
