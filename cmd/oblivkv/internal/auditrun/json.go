package auditrun

import (
	"encoding/json"
	"io"
)

// JSONResult is the JSON form of a Result (docs/testing.md describes it).
type JSONResult struct {
	Protocol  string   `json:"protocol"`
	Workloads []string `json:"workloads"`
	Records   int      `json:"records"`
	Ops       int      `json:"ops"`
	Clients   int      `json:"clients"`
	Seed      uint64   `json:"seed"`
	// AttackAccuracy, Chance and ChanceBound are the frequency attack's
	// share of the top keys recovered, the share chance gives, and the
	// largest share chance gives but with probability 1e-5 (all 0
	// without a zipf run).
	AttackAccuracy float64     `json:"attack_accuracy"`
	Chance         float64     `json:"chance"`
	ChanceBound    float64     `json:"chance_bound"`
	Pass           bool        `json:"pass"`
	Checks         []JSONCheck `json:"checks"`
}

// JSONCheck is one check. Critical is null for a check that had too
// few samples to test anything (audit.Check.Applicable).
type JSONCheck struct {
	Name     string   `json:"name"`
	Stat     float64  `json:"stat"`
	Critical *float64 `json:"critical"`
	P        float64  `json:"p"`
	Pass     bool     `json:"pass"`
	Detail   string   `json:"detail,omitempty"`
}

// JSON returns the JSON form of res.
func (res *Result) JSON() JSONResult {
	c := res.Config
	out := JSONResult{Protocol: c.Protocol, Workloads: c.Workloads, Records: c.Records, Ops: c.Ops,
		Clients: c.Clients, Seed: c.Seed, Pass: res.Pass(), Checks: []JSONCheck{}}
	if a := res.Attack; a != nil {
		out.AttackAccuracy, out.Chance, out.ChanceBound = a.Accuracy, a.Chance, a.Bound
	}
	for _, ch := range res.Checks {
		jc := JSONCheck{Name: ch.Name, Stat: finite(ch.Stat), P: finite(ch.P), Pass: ch.Pass(), Detail: ch.Detail}
		if ch.Applicable() {
			v := finite(ch.Critical)
			jc.Critical = &v
		}
		out.Checks = append(out.Checks, jc)
	}
	return out
}

// WriteJSON writes the JSON form of res, indented.
func (res *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res.JSON())
}
