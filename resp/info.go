package resp

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/oblivkv/oblivkv/kv"
)

// redisVersion is the Redis version whose RESP2 command subset oblivkv
// follows, for clients that read redis_version from INFO.
const redisVersion = "7.0.0"

// cmdInfo replies the INFO text: every section, or those named.
func cmdInfo(c *conn, args [][]byte) {
	var b strings.Builder
	for _, sec := range c.s.info() {
		if !wanted(args[1:], sec.Name) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		writeSection(&b, sec)
	}
	c.wr.bulkString(b.String())
}

// wanted reports whether INFO with these section arguments shows section
// name.
func wanted(sections [][]byte, name string) bool {
	if len(sections) == 0 {
		return true
	}
	for _, s := range sections {
		if is(s, "all") || is(s, "everything") || is(s, "default") ||
			is(s, strings.ToLower(name)) {
			return true
		}
	}
	return false
}

func writeSection(b *strings.Builder, sec InfoSection) {
	b.WriteString("# ")
	b.WriteString(sanitize(sec.Name, false))
	b.WriteString("\r\n")
	for _, f := range sec.Fields {
		b.WriteString(sanitize(f.Key, true))
		b.WriteByte(':')
		b.WriteString(sanitize(f.Value, false))
		b.WriteString("\r\n")
	}
}

// sanitize keeps a name or value on its line: CR and LF (and, in keys,
// ':' and spaces) become '_'.
func sanitize(s string, key bool) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || key && (r == ':' || r == ' ') {
			return '_'
		}
		return r
	}, s)
}

// info assembles the sections: the built-in ones, extended or followed by
// those of Options.Info. The Oblivkv section lists the store's parameters,
// then those Options.Info adds to it (the deployment's), then the store's
// and its backend's traffic and the protocol's own stats.
func (s *Server) info() []InfoSection {
	st := s.store.Stats()
	secs := []InfoSection{s.serverSection(), s.clientsSection(), parametersSection(st),
		s.statsSection(), keyspaceSection(st)}
	if s.opts.Info != nil {
		for _, extra := range s.opts.Info() {
			secs = mergeSection(secs, extra)
		}
	}
	return mergeSection(secs, trafficSection(st))
}

func (s *Server) serverSection() InfoSection {
	up := time.Since(s.start)
	return InfoSection{Name: "Server", Fields: []InfoField{
		{"oblivkv_version", s.opts.Version},
		{"redis_version", redisVersion},
		{"redis_mode", "standalone"},
		{"process_id", strconv.Itoa(os.Getpid())},
		{"uptime_in_seconds", itoa(int64(up / time.Second))},
		{"uptime_in_days", itoa(int64(up / (24 * time.Hour)))},
	}}
}

func (s *Server) clientsSection() InfoSection {
	return InfoSection{Name: "Clients", Fields: []InfoField{
		{"connected_clients", strconv.Itoa(len(s.clients()))},
		{"maxclients", strconv.Itoa(s.opts.MaxClients)},
	}}
}

// mergeSection adds extra's fields to the section of its name, or appends
// it as a new section.
func mergeSection(secs []InfoSection, extra InfoSection) []InfoSection {
	for i := range secs {
		if strings.EqualFold(secs[i].Name, extra.Name) {
			secs[i].Fields = append(secs[i].Fields, extra.Fields...)
			return secs
		}
	}
	return append(secs, extra)
}

// oblivkvSection is the name of the section of oblivkv's own figures.
const oblivkvSection = "Oblivkv"

func parametersSection(st kv.Stats) InfoSection {
	return InfoSection{Name: oblivkvSection, Fields: []InfoField{
		{"protocol", st.Protocol},
		{"capacity", strconv.Itoa(st.Capacity)},
		{"value_size", strconv.Itoa(st.ValueSize)},
		{"max_key_size", strconv.Itoa(st.MaxKeySize)},
	}}
}

// trafficSection extends the Oblivkv section with the store's operations,
// its backend traffic (what the storage operator sees) and the protocol's
// stats (its derived parameters, stash and cache sizes, counters).
func trafficSection(st kv.Stats) InfoSection {
	b := st.Backend
	fields := []InfoField{
		{"gets", utoa(st.Gets)}, {"puts", utoa(st.Puts)}, {"deletes", utoa(st.Deletes)},
		{"ops", utoa(st.Ops())}, {"keys", itoa(st.Keys)},
		{"backend_calls", utoa(b.Calls)}, {"backend_reads", utoa(b.Reads)},
		{"backend_writes", utoa(b.Writes)}, {"backend_deletes", utoa(b.Deletes)},
		{"backend_addrs_read", utoa(b.AddrsRead)}, {"backend_addrs_written", utoa(b.AddrsWritten)},
		{"backend_addrs_deleted", utoa(b.AddrsDeleted)},
		{"backend_bytes_read", utoa(b.BytesRead)}, {"backend_bytes_written", utoa(b.BytesWritten)},
		{"backend_bytes", utoa(b.Bytes())}, {"backend_errors", utoa(b.Errors)},
	}
	for _, e := range st.Extra {
		fields = append(fields, InfoField{e.Name, strconv.FormatFloat(e.Value, 'f', -1, 64)})
	}
	return InfoSection{Name: oblivkvSection, Fields: fields}
}

// statsSection holds the server's counters Redis has too.
func (s *Server) statsSection() InfoSection {
	return InfoSection{Name: "Stats", Fields: []InfoField{
		{"total_connections_received", utoa(s.connsTotal.Load())},
		{"total_commands_processed", utoa(s.cmdsN.Load())},
		{"rejected_connections", utoa(s.rejected.Load())},
	}}
}

func keyspaceSection(st kv.Stats) InfoSection {
	sec := InfoSection{Name: "Keyspace"}
	if st.Keys > 0 {
		sec.Fields = []InfoField{{"db0", "keys=" + itoa(st.Keys) + ",expires=0,avg_ttl=0"}}
	}
	return sec
}

func itoa(n int64) string  { return strconv.FormatInt(n, 10) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
