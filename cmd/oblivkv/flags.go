package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/oblivkv/oblivkv/backend/disk"
	"github.com/oblivkv/oblivkv/cmd/oblivkv/internal/setup"
	"github.com/oblivkv/oblivkv/kv"
)

// storeFlags are the deployment flags shared by serve and load.
type storeFlags struct {
	protocol  string
	backend   string
	dataDir   string
	capacity  int
	valueSize int
	latency   time.Duration
	tapFile   string
	opts      []string
	fsync     fsyncPolicy
	disk      diskFlags
}

func (f *storeFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.protocol, "protocol", setup.DefaultProtocol, "protocol of a new store, one of "+strings.Join(kv.Protocols(), ", ")+" (an existing store keeps its own: a different one is refused)")
	registerLocation(cmd, &f.backend, &f.dataDir)
	fs.IntVar(&f.capacity, "capacity", kv.DefaultCapacity, "number of keys a new store can hold")
	fs.IntVar(&f.valueSize, "value-size", kv.DefaultValueSize, "largest value in bytes of a new store")
	fs.DurationVar(&f.latency, "backend-latency", 0, "delay added to every backend round trip, to emulate a WAN (e.g. 10ms)")
	fs.StringVar(&f.tapFile, "tap", "", "write the adversary's view (one record per backend call) to this file")
	registerFsync(cmd, &f.fsync)
	f.disk.register(cmd)
	registerOpt(cmd, &f.opts, "")
}

// diskFlags are the flags of the disk backend.
type diskFlags struct {
	cache  mebibytes
	engine diskEngine
}

// register adds --disk-engine and --disk-cache.
func (d *diskFlags) register(cmd *cobra.Command) {
	d.cache, d.engine = disk.DefaultCacheSize>>20, setup.EngineAuto
	cmd.Flags().Var(&d.engine, "disk-engine", "storage engine of a new disk store: slots (values in files of equal-sized slots), pebble (an LSM database), or auto: slots for the oblivious protocols, pebble for plain and encrypted; an existing store keeps its own")
	cmd.Flags().Var(&d.cache, "disk-cache", fmt.Sprintf("MiB of memory the pebble engine may use to cache storage's blocks, taken as blocks are read (beside it pebble keeps up to two memtables of %d MiB)", disk.DefaultMemTableSize>>20))
}

// diskEngine is the value of --disk-engine, one of setup.DiskEngines.
type diskEngine string

func (e *diskEngine) String() string { return string(*e) }

func (e *diskEngine) Set(v string) error {
	if !slices.Contains(setup.DiskEngines, v) {
		return fmt.Errorf("want one of %s, got %q", strings.Join(setup.DiskEngines, ", "), v)
	}
	*e = diskEngine(v)
	return nil
}

func (e *diskEngine) Type() string { return "engine" }

// mebibytes is the value of a flag given in MiB, at least 1.
type mebibytes int64

func (m *mebibytes) String() string { return strconv.FormatInt(int64(*m), 10) }

func (m *mebibytes) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 1<<20 {
		return fmt.Errorf("want a whole number of MiB from 1 to %d, got %q", 1<<20, v)
	}
	*m = mebibytes(n)
	return nil
}

func (m *mebibytes) Type() string { return "MiB" }

// bytes returns m in bytes.
func (m mebibytes) bytes() int64 { return int64(m) << 20 }

// registerLocation adds the flags that say where a store is: --backend
// and --data-dir.
func registerLocation(cmd *cobra.Command, backend, dataDir *string) {
	fs := cmd.Flags()
	fs.StringVar(backend, "backend", "disk", "untrusted storage: mem, disk (embedded, under --data-dir), redis://[USER:PASS@]HOST:PORT[/DB], or over TLS rediss://...[?tls_ca=FILE&tls_cert=FILE&tls_key=FILE]")
	fs.StringVar(dataDir, "data-dir", "./oblivkv-data", "directory of the key file and of the disk backend")
}

// fsyncPolicy is the value of --fsync: "always" (the default) or "none".
type fsyncPolicy struct{ none bool }

func (p *fsyncPolicy) String() string {
	if p.none {
		return "none"
	}
	return "always"
}

func (p *fsyncPolicy) Set(v string) error {
	switch v {
	case "always", "none":
		p.none = v == "none"
		return nil
	}
	return fmt.Errorf("want always or none, got %q", v)
}

func (p *fsyncPolicy) Type() string { return "policy" }

// registerFsync adds the --fsync flag.
func registerFsync(cmd *cobra.Command, p *fsyncPolicy) {
	cmd.Flags().Var(p, "fsync", "always: an acknowledged write is on stable storage (the journal fsyncs before answering, and the disk backend too unless the journal holds every write); none: no fsync, so a power loss may lose the last moments, a process crash nothing")
}

// registerOpt adds the repeatable --opt flag; more is added to its help.
func registerOpt(cmd *cobra.Command, opts *[]string, more string) {
	cmd.Flags().StringArrayVar(opts, "opt", nil, "set a field of the protocol's Options, as `NAME=VALUE` (name case-insensitive; e.g. trees=8, epoch=2ms); repeatable"+more+"; see docs/OPERATIONS.md")
}

// options returns the setup options; parameters the user did not set are
// left zero so an existing store keeps its own.
func (f *storeFlags) options(cmd *cobra.Command) setup.Options {
	o := setup.Options{Backend: f.backend, DataDir: f.dataDir, BackendLatency: f.latency, TapFile: f.tapFile,
		OptionArgs: f.opts, NoFsync: f.fsync.none, DiskCache: f.disk.cache.bytes(), DiskEngine: string(f.disk.engine)}
	fs := cmd.Flags()
	if fs.Changed("protocol") {
		o.Protocol = f.protocol
	}
	if fs.Changed("capacity") {
		o.Capacity = f.capacity
	}
	if fs.Changed("value-size") {
		o.ValueSize = f.valueSize
	}
	return o
}
