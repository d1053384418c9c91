package records

import (
	"bytes"
	"strings"
	"testing"
)

// samples are records whose keys and values are text, binary, empty or
// awkward for one format or the other.
var samples = []Record{
	{Key: "alice", Value: []byte("1")},
	{Key: "", Value: nil},
	{Key: "comma,quote\"", Value: []byte("line\nbreak")},
	{Key: "cr", Value: []byte("a\r\nb\r")},
	{Key: "\xff\xfe", Value: []byte{0, 1, 2, 0xff}},
	{Key: " leading space", Value: []byte("\\.")},
	{Key: "base64", Value: []byte("base64")},
	{Key: "utf8 é ✓ \u2028", Value: []byte("<&>")},
}

// roundTrip writes recs in format and reads them back.
func roundTrip(t *testing.T, format string, recs []Record) []Record {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, format)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf, format)
	if err != nil {
		t.Fatalf("%s: reading back %q: %v", format, buf.String(), err)
	}
	return got
}

func equal(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// TestRoundTrip: every sample, text or binary, reads back equal in both
// formats.
func TestRoundTrip(t *testing.T) {
	for _, format := range []string{"csv", "jsonl"} {
		if got := roundTrip(t, format, samples); !equal(got, samples) {
			t.Errorf("%s: read back %q, want %q", format, got, samples)
		}
	}
}

// TestTextStaysText: text records are written in the plain forms (as a
// person or load's older readers write them), binary ones in base64.
func TestTextStaysText(t *testing.T) {
	for format, want := range map[string]string{
		"csv":   "alice,1\n\"comma,quote\"\"\",\"line\nbreak\"\n//4=,AAEC/w==,base64\n",
		"jsonl": `{"key":"alice","value":"1"}` + "\n" + `{"key":"comma,quote\"","value":"line\nbreak"}` + "\n" + `{"key_base64":"//4=","value_base64":"AAEC/w=="}` + "\n",
	} {
		var buf bytes.Buffer
		w := NewWriter(&buf, format)
		for _, r := range []Record{samples[0], samples[2], samples[4]} {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Errorf("%s: wrote %q, want %q", format, buf.String(), want)
		}
	}
}

// TestReadsHandWrittenFiles: the forms load read before base64 existed
// still read as they did, blank JSONL lines included.
func TestReadsHandWrittenFiles(t *testing.T) {
	want := []Record{{Key: "alice", Value: []byte("1")}, {Key: "bob", Value: []byte("two, quoted")}}
	for format, file := range map[string]string{
		"csv":   "alice,1\r\nbob,\"two, quoted\"\r\n",
		"jsonl": `{"key":"alice","value":"1"}` + "\n\n" + `{"value":"two, quoted","key":"bob"}` + "\n",
	} {
		got, err := Read(strings.NewReader(file), format)
		if err != nil || !equal(got, want) {
			t.Errorf("%s: read %q, %v; want %q", format, got, err, want)
		}
	}
}

// TestRejectsMalformedRecords: a record that is not one of the forms is
// an error naming where it is, never a record read some other way.
func TestRejectsMalformedRecords(t *testing.T) {
	for _, tc := range []struct{ format, file, where string }{
		{"csv", "a,1\nb\n", "record 2"},
		{"csv", "a,1\nb,2,hex\n", "record 2"},
		{"csv", "a,1,base64\n", "record 1"},
		{"csv", "YQ==,MQ==,base64,x\n", "record 1"},
		{"jsonl", `{"key":"a","value":"1"}` + "\n" + `{"key":"b"}` + "\n", "line 2"},
		{"jsonl", `{"key":"a","key_base64":"YQ==","value":"1"}` + "\n", "line 1"},
		{"jsonl", `{"key_base64":"not base64!","value":"1"}` + "\n", "line 1"},
		{"jsonl", `{"key":"a","value":1}` + "\n", "line 1"},
		{"jsonl", `{"key":"a","value":"1"` + "\n", "line 1"},
	} {
		got, err := Read(strings.NewReader(tc.file), tc.format)
		if err == nil || !strings.Contains(err.Error(), tc.where) {
			t.Errorf("%s %q: read %q, %v; want an error at %s", tc.format, tc.file, got, err, tc.where)
		}
	}
}

// TestFormat: a format is named, or taken from the file's extension.
func TestFormat(t *testing.T) {
	for _, tc := range []struct{ name, path, want string }{
		{"", "dir.v1/out.csv", "csv"},
		{"", "out.jsonl", "jsonl"},
		{"", "out.ndjson", "jsonl"},
		{"csv", "out.jsonl", "csv"},
	} {
		if got, err := Format(tc.name, tc.path); got != tc.want || err != nil {
			t.Errorf("Format(%q, %q) = %q, %v; want %q", tc.name, tc.path, got, err, tc.want)
		}
	}
	for _, path := range []string{"out", "out.txt", "dir.csv/out"} {
		if got, err := Format("", path); err == nil {
			t.Errorf("Format of %q = %q, want an error", path, got)
		}
	}
}

// FuzzRoundTrip: any key and value read back equal in both formats. The
// seed corpus (the samples) runs with the other tests.
func FuzzRoundTrip(f *testing.F) {
	for _, r := range samples {
		f.Add(r.Key, r.Value)
	}
	f.Fuzz(func(t *testing.T, key string, val []byte) {
		in := []Record{{Key: key, Value: val}, {Key: "next", Value: []byte("after")}}
		for _, format := range []string{"csv", "jsonl"} {
			if got := roundTrip(t, format, in); !equal(got, in) {
				t.Fatalf("%s: read back %q, want %q", format, got, in)
			}
		}
	})
}
