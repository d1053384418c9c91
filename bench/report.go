package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// utilisationStat is the protocol counter (kv.Stats.Extra) of a batching
// protocol's batch utilisation: the share, in [0, 1], of the request slots
// of its batches that carried real requests rather than padding. The
// table shows it as the "util" column when any protocol of the run
// reports it.
const utilisationStat = "batch_utilisation"

// WriteTable writes one aligned row per result; the "vs" column is each
// protocol's throughput as a multiple of the first one's. A "util" column
// (utilisationStat, "-" for protocols without it) appears when any result
// has that counter, and "jrnl B/op" and "fsync/s" columns when any result
// has journal figures.
func WriteTable(w io.Writer, results []Result) error {
	header, rows := tableRows(results)
	if header == nil {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, cells := range append([][]string{header}, rows...) {
		fmt.Fprint(tw, strings.Join(cells, "\t")+"\t\n")
	}
	return tw.Flush()
}

// tableRows is the table of WriteTable: its header and one row of cells
// per result; nil when there are no results.
func tableRows(results []Result) (header []string, rows [][]string) {
	if len(results) == 0 {
		return nil, nil
	}
	showUtil, showJournal := false, false
	for _, r := range results {
		showUtil = showUtil || extra(r, utilisationStat) != nil
		showJournal = showJournal || r.JournalBytesPerOp != nil
	}
	first := results[0]
	header = []string{"protocol", "ops/s", "vs " + first.Protocol, "p50 ms", "p95 ms", "p99 ms", "max ms", "rt/op", "bytes/op", "ampl"}
	if showUtil {
		header = append(header, "util")
	}
	if showJournal {
		header = append(header, "jrnl B/op", "fsync/s")
	}
	header = append(header, "errors")
	for _, r := range results {
		vs := "-"
		if first.OpsPerSec > 0 {
			vs = fmt.Sprintf("%.2fx", r.OpsPerSec/first.OpsPerSec)
		}
		cells := []string{r.Protocol, fmt.Sprintf("%.0f", r.OpsPerSec), vs,
			latency(r.P50MS), latency(r.P95MS), latency(r.P99MS), latency(r.MaxMS),
			opt(r.RoundTripsPerOp, 2), opt(r.BytesPerOp, 0), opt(r.Amplification, 2)}
		if showUtil {
			cells = append(cells, opt(extra(r, utilisationStat), 2))
		}
		if showJournal {
			cells = append(cells, opt(r.JournalBytesPerOp, 0), opt(r.JournalFsyncsPerSec, 0))
		}
		rows = append(rows, append(cells, strconv.FormatUint(r.Errors, 10)))
	}
	return header, rows
}

// extra returns the protocol counter called name, or nil if r has none.
func extra(r Result, name string) *float64 {
	for _, s := range r.Extra {
		if s.Name == name {
			return &s.Value
		}
	}
	return nil
}

// latency formats milliseconds with three significant digits (at most
// six decimals), so both in-memory microseconds and WAN milliseconds read
// well.
func latency(v float64) string {
	if v <= 0 {
		return "0"
	}
	decimals := min(max(2-int(math.Floor(math.Log10(v))), 0), 6)
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func opt(f *float64, prec int) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f, 'f', prec, 64)
}

// jsonResult adds the protocol's extra counters as an object.
type jsonResult struct {
	Result
	Extra map[string]float64 `json:"extra"`
}

// WriteJSON writes the results as a JSON array of objects, one per
// protocol, with the fields of Result and "extra", the protocol's own
// counters by name.
func WriteJSON(w io.Writer, results []Result) error {
	out := make([]jsonResult, len(results))
	for i, r := range results {
		out[i] = jsonResult{Result: r, Extra: map[string]float64{}}
		for _, s := range r.Extra {
			out[i].Extra[s.Name] = s.Value
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteCSV writes a header and one row per result, with the JSON field
// names as columns; null figures are empty cells, and the extra counters
// are one "name=value;name=value" cell.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	header, _, err := row(Result{})
	if err != nil {
		return err
	}
	if err := cw.Write(append(header, "extra")); err != nil {
		return err
	}
	for _, r := range results {
		_, cells, err := row(r)
		if err != nil {
			return err
		}
		if err := cw.Write(append(cells, extraCell(r))); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// row flattens a result through its JSON form, so CSV columns and JSON
// fields never drift apart.
func row(r Result) (names, cells []string, err error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the opening brace
		return nil, nil, err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		names = append(names, k.(string))
		cells = append(cells, cell(v))
	}
	return names, cells, nil
}

func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return fmt.Sprint(v)
}

func extraCell(r Result) string {
	parts := make([]string, len(r.Extra))
	for i, s := range r.Extra {
		parts[i] = s.Name + "=" + strconv.FormatFloat(s.Value, 'g', -1, 64)
	}
	return strings.Join(parts, ";")
}
