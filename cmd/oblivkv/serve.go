package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/auth"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/backup"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
	"github.com/oblivkv/oblivkv/kv/options"
	"github.com/oblivkv/oblivkv/metrics"
	"github.com/oblivkv/oblivkv/resp"
)

// shutdownGrace bounds how long a shutdown waits for in-flight commands.
const shutdownGrace = 10 * time.Second

func newServeCmd() *cobra.Command {
	var sf storeFlags
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a store over the Redis protocol (RESP2)",
		Long: `Serve a store over the Redis protocol (RESP2).

With no flags it listens on 127.0.0.1:6380 and keeps a treebeard store (65536
keys of up to 1024 bytes) in the embedded on-disk backend under ./oblivkv-data,
creating a 0600 key file there on first start. A new treebeard store writes its
storage trees before the server listens, which takes some seconds. SIGINT
or SIGTERM shut it down cleanly (also while a new store is being created:
the next start creates it afresh), and starting again on the same data dir
serves the same data.

The proxy's trusted state is journaled under the data dir (DIR/journal): with
--fsync always (the default) no protocol loses an acknowledged write to kill -9
or a power cut, and storage restored from an older copy is refused at start.
See docs/OPERATIONS.md, "Durability", for what survives what.

--protocol, --capacity and --value-size shape a new store. An existing store
is served with its own: one given that differs from the store's (another
--protocol, say) is refused at start, before anything is written.

--opt NAME=VALUE sets a field of the protocol's Options (repeatable, e.g.
--opt trees=8 --opt epoch=2ms); see docs/OPERATIONS.md for each protocol's.
A new store records its options, and later starts use them with no --opt
given; an --opt that differs from the recorded value is refused before
anything is written. 'oblivkv info' shows a store's options.

Who may connect: --requirepass (or $OBLIVKV_PASSWORD) sets the password of
the default user (AUTH PASSWORD); --users FILE adds users with a password hash
and a permission, read-write or read-only (AUTH USER PASSWORD; 'oblivkv passwd'
writes their lines). Until a client authenticates it may only PING, AUTH,
HELLO and QUIT. --tls-cert and --tls-key serve clients over TLS; --tls-ca also
requires a client certificate signed by one of its CAs. Protected mode, as in
Redis: listening on a non-loopback address with no password, no users file and
no --tls-ca is refused unless --protected-mode=false. See docs/OPERATIONS.md,
"Security".

--metrics-addr HOST:PORT serves Prometheus metrics on /metrics (see
docs/OPERATIONS.md, "Metrics"); they show the trusted side's view, so serve
them only to the proxy's operators.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), sf.options(cmd), f)
		},
	}
	sf.register(cmd)
	f.sec.register(cmd)
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:6380", "address to listen on")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://`HOST:PORT`/metrics (empty: no metrics)")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of serving (from when the store is open to shutdown) to `FILE`, for go tool pprof")
	return cmd
}

// serveFlags are serve's flags besides the store's.
type serveFlags struct {
	listen, metricsAddr, cpuProfile string
	sec                             securityFlags
}

// listeners are what serve listens on, and who may connect.
type listeners struct {
	clients, metrics net.Listener // metrics is nil without --metrics-addr
	users            *auth.Users  // nil: no authentication
	tls              bool
}

// open checks the security flags and listens: everything that can be
// checked is, before a store is written (the protocol and the options are
// checked in setup.Open).
func (f serveFlags) open() (*listeners, error) {
	users, err := f.sec.users()
	if err != nil {
		return nil, err
	}
	tlsConf, err := f.sec.tlsConfig()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l := &listeners{clients: ln, users: users, tls: tlsConf != nil}
	if err := f.sec.checkProtected(ln.Addr(), users); err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	if tlsConf != nil {
		l.clients = tls.NewListener(ln, tlsConf)
	}
	if f.metricsAddr != "" {
		if l.metrics, err = net.Listen("tcp", f.metricsAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("metrics listen: %w", err)
		}
	}
	return l, nil
}

func (l *listeners) close() {
	l.clients.Close()
	if l.metrics != nil {
		l.metrics.Close()
	}
}

// authAttrs are the log attributes saying who may connect.
func (l *listeners) authAttrs() []any {
	users := "none (no authentication)"
	if l.users != nil {
		users = strings.Join(l.users.Names(), ",")
	}
	return []any{"users", users, "tls", l.tls}
}

func serve(ctx context.Context, opts setup.Options, f serveFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	l, err := f.open()
	if err != nil {
		return err
	}
	ln, mln := l.clients, l.metrics
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	opened, err := openInterruptibly(ctx, opts, sigs, log)
	if err != nil {
		l.close()
		if errors.Is(err, errInterrupted) {
			log.Info("interrupted while opening the store: nothing was served; a new store that was not finished is built afresh at the next start")
			return nil
		}
		return err
	}
	stats := opened.Store.Stats()
	attrs := []any{"listen", ln.Addr().String(), "protocol", stats.Protocol,
		"backend", setup.BackendKind(opts.Backend), "data_dir", opts.DataDir, "new_store", opened.Fresh,
		"capacity", stats.Capacity, "value_size", stats.ValueSize, "keys", stats.Keys}
	options := strings.Join(options.Args(opened.Settings), " ")
	if options != "" {
		attrs = append(attrs, "options", options)
	}
	fingerprint := kv.OptionsFingerprint(stats.Protocol, opened.Settings)
	attrs = append(attrs, "options_fingerprint", fingerprint)
	// The security bounds a configuration guarantees (Waffle's alpha and
	// beta, ...) are protocol stats named theoretical_*: shown at start.
	for _, e := range stats.Extra {
		if strings.HasPrefix(e.Name, "theoretical_") {
			attrs = append(attrs, e.Name, e.Value)
		}
	}
	attrs = append(attrs, l.authAttrs()...)
	store := newPausableStore(opened, opts, log)
	backups, err := listenForBackups(opts, store, log)
	if err != nil {
		l.close()
		return errors.Join(err, store.Close())
	}
	ropts := resp.Options{Logger: log, Version: version, Info: deploymentInfo(opts, options, fingerprint, opened.Restored), Users: l.users}
	var alsoStop []func(context.Context) error
	if mln != nil {
		mx := metrics.New(store, metrics.Info{Commands: resp.CommandNames(),
			Backend: setup.BackendKind(opts.Backend), Options: options})
		ropts.Observe = mx.ObserveCommand
		alsoStop = append(alsoStop, mx.Shutdown)
		attrs = append(attrs, "metrics", "http://"+mln.Addr().String()+"/metrics")
		go func() {
			if err := mx.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
	}
	if backups != nil {
		alsoStop = append(alsoStop, func(context.Context) error { return backups.Close() })
		attrs = append(attrs, "backup_socket", backup.SocketFile(opts.DataDir))
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		l.close()
		return errors.Join(err, store.Close())
	}
	defer stopProfile()
	log.Info("oblivkv serving", attrs...)
	err = serveUntilSignal(resp.NewServer(store, ropts), ln, sigs, log, alsoStop...)
	err = errors.Join(err, store.Close())
	if err == nil {
		log.Info("shut down cleanly")
	}
	return err
}

// listenForBackups serves `oblivkv backup` on the data directory's
// socket (package backup) for a store kept in one: none for the mem
// backend.
func listenForBackups(opts setup.Options, store *pausableStore, log *slog.Logger) (*backup.Listener, error) {
	if opts.Backend == "mem" || opts.DataDir == "" {
		return nil, nil
	}
	return backup.Listen(opts.DataDir, store.backup, log)
}

// serveUntilSignal serves srv on ln until a signal or srv's failure,
// then shuts srv down, and alsoStop after it, letting what is in
// progress finish within shutdownGrace.
func serveUntilSignal(srv *resp.Server, ln net.Listener, sigs <-chan os.Signal, log *slog.Logger, alsoStop ...func(context.Context) error) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var err error
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	case err = <-served:
		log.Error("server stopped", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = errors.Join(err, srv.Shutdown(sctx))
	for _, stop := range alsoStop {
		err = errors.Join(err, stop(sctx))
	}
	return err
}

// startCPUProfile starts writing a CPU profile to path, if given, and
// returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// errInterrupted reports a signal received while the store was opened.
var errInterrupted = errors.New("interrupted")

// openInterruptibly opens (or creates) the store and builds its layout,
// stopping cleanly at SIGINT or SIGTERM: the backend calls in progress are
// cancelled, the store is closed if it got opened, and errInterrupted is
// returned. A creation cut short so never committed its store (kv writes
// the metadata record last), and the next start creates it afresh.
func openInterruptibly(ctx context.Context, opts setup.Options, sigs <-chan os.Signal, log *slog.Logger) (*setup.Opened, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done, exited := make(chan struct{}), make(chan struct{})
	var interrupted atomic.Bool
	go func() {
		defer close(exited)
		select {
		case sig := <-sigs:
			log.Info("stopping", "signal", sig.String())
			interrupted.Store(true)
			cancel()
		case <-done:
		}
	}()
	began := time.Now()
	opened, err := setup.Open(ctx, opts)
	if err == nil {
		if err = kv.Prepare(ctx, opened.Store); err != nil {
			err = errors.Join(fmt.Errorf("preparing the store: %w", err), opened.Close())
			opened = nil
		}
	}
	close(done)
	<-exited
	if interrupted.Load() {
		if opened != nil {
			err = opened.Close()
		}
		return nil, errors.Join(errInterrupted, err)
	}
	if err == nil && opened.Fresh {
		log.Info("new store ready", "seconds", time.Since(began).Seconds())
	}
	return opened, err
}

// deploymentInfo adds the deployment settings to INFO's Oblivkv section:
// the protocol's options (as 'oblivkv info' shows them; empty: the
// protocol's defaults) and their fingerprint, the backend and its emulated
// latency, and the backup the store was restored from.
func deploymentInfo(opts setup.Options, options, fingerprint string, restored *kv.Restore) func() []resp.InfoSection {
	fields := []resp.InfoField{
		{Key: "restored", Value: restoredInfo(restored)},
		{Key: "options", Value: options},
		{Key: "backend", Value: setup.BackendKind(opts.Backend)},
		{Key: "backend_latency_ms", Value: fmt.Sprint(opts.BackendLatency.Seconds() * 1000)},
		{Key: "options_fingerprint", Value: fingerprint},
	}
	return func() []resp.InfoSection { return []resp.InfoSection{{Name: "Oblivkv", Fields: fields}} }
}

// restoredInfo is INFO's restored field: "no", or where and when the
// store was restored from a backup, and the archive's digest.
func restoredInfo(r *kv.Restore) string {
	if r == nil {
		return "no"
	}
	return fmt.Sprintf("position=%d,time=%s,sha256=%s", r.At, r.Time.Format(time.RFC3339), r.Digest)
}
