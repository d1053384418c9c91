package audit

import (
	"reflect"
	"testing"
)

func TestHistogram(t *testing.T) {
	a := Histogram{Counts: []int{1, 1, 2}}
	if a.Total() != 4 || !reflect.DeepEqual(a.Rebin(2).Counts, []int{2, 2}) {
		t.Fatalf("total %d rebin %v", a.Total(), a.Rebin(2).Counts)
	}
	b := Histogram{Counts: []int{0, 0, 2, 2}}
	if d := TotalVariation(a, b); d != 0.5 {
		t.Fatalf("TV = %v; want 0.5", d)
	}
	if d := TotalVariation(a, a); d != 0 {
		t.Fatalf("TV(a, a) = %v", d)
	}
	if d := TotalVariation(a, Histogram{}); d != 0 {
		t.Fatalf("TV(a, empty) = %v; want 0", d)
	}
	c := a.Rebin(1)
	c.Counts[0]++
	if a.Counts[0] != 1 {
		t.Fatalf("Rebin(1) shares its counts with the histogram")
	}
	var h Histogram
	h.Add(3)
	h.Add(0)
	if !reflect.DeepEqual(h.Counts, []int{1, 0, 0, 1}) {
		t.Fatalf("Add(3), Add(0): counts %v", h.Counts)
	}
}
