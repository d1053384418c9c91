// Package records reads and writes files of key-value records, one record
// a line, in the two formats `oblivkv load` reads and `oblivkv dump`
// writes: CSV and JSONL. It owns their encoding of arbitrary bytes, so
// that every key and value written reads back equal, and files written by
// hand in the plain forms still load.
//
// CSV: a record is "key,value" (RFC 4180 quoting), both fields as text;
// a record whose key or value is not text (not valid UTF-8, or holding a
// carriage return, which CSV readers drop before a line feed) is written
// as "key,value,base64" with both fields in standard base64.
//
// JSONL: an object per line with the key in "key" and the value in
// "value" as JSON strings; a key or value that is not valid UTF-8 is held
// in "key_base64" or "value_base64" instead, in standard base64.
//
// It must never log or put in an error what a record holds: errors name
// records by their position in the file.
package records

import (
	"bufio"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Record is one key and its value.
type Record struct {
	Key   string
	Value []byte
}

// Format returns the format named by name (csv, jsonl or ndjson), or by
// the extension of path when name is empty.
func Format(name, path string) (string, error) {
	if name == "" {
		name = strings.TrimPrefix(filepath.Ext(path), ".")
	}
	switch name {
	case "csv", "jsonl":
		return name, nil
	case "ndjson":
		return "jsonl", nil
	}
	return "", fmt.Errorf("unknown format %q: use --format csv or --format jsonl", name)
}

// base64Field is the third field of a CSV record in base64.
const base64Field = "base64"

// Writer writes records in one format.
type Writer struct {
	csv  *csv.Writer
	json *bufio.Writer
}

// NewWriter returns a Writer of format (see Format) to w. Flush ends it.
func NewWriter(w io.Writer, format string) *Writer {
	if format == "csv" {
		return &Writer{csv: csv.NewWriter(w)}
	}
	return &Writer{json: bufio.NewWriter(w)}
}

// Write writes one record.
func (w *Writer) Write(r Record) error {
	if w.csv != nil {
		return w.csv.Write(csvFields(r))
	}
	line, err := json.Marshal(jsonOf(r))
	if err != nil {
		return err
	}
	_, err = w.json.Write(append(line, '\n'))
	return err
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	if w.csv != nil {
		w.csv.Flush()
		return w.csv.Error()
	}
	return w.json.Flush()
}

// csvText reports whether s can be a CSV field as it is.
func csvText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, '\r')
}

func csvFields(r Record) []string {
	if csvText(r.Key) && csvText(string(r.Value)) {
		return []string{r.Key, string(r.Value)}
	}
	enc := base64.StdEncoding
	return []string{enc.EncodeToString([]byte(r.Key)), enc.EncodeToString(r.Value), base64Field}
}

// jsonRecord is one JSONL line; of each pair of fields, one is set.
type jsonRecord struct {
	Key         *string `json:"key,omitempty"`
	KeyBase64   []byte  `json:"key_base64,omitempty"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 []byte  `json:"value_base64,omitempty"`
}

func jsonOf(r Record) jsonRecord {
	var j jsonRecord
	if utf8.ValidString(r.Key) {
		j.Key = &r.Key
	} else {
		j.KeyBase64 = []byte(r.Key)
	}
	if v := string(r.Value); utf8.ValidString(v) {
		j.Value = &v
	} else {
		j.ValueBase64 = r.Value
	}
	return j
}

// Read reads every record of a file of format (see Format). An error
// names the record or line it is in.
func Read(r io.Reader, format string) ([]Record, error) {
	if format == "csv" {
		return readCSV(r)
	}
	return readJSONL(r)
}

func readCSV(r io.Reader) ([]Record, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	var out []Record
	for n := 1; ; n++ {
		fields, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		rec, err := fromCSV(fields)
		if err != nil {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("csv: record %d (line %d): %w", n, line, err)
		}
		out = append(out, rec)
	}
}

func fromCSV(fields []string) (Record, error) {
	switch {
	case len(fields) == 2:
		return Record{Key: fields[0], Value: []byte(fields[1])}, nil
	case len(fields) == 3 && fields[2] == base64Field:
		key, kerr := base64.StdEncoding.DecodeString(fields[0])
		val, verr := base64.StdEncoding.DecodeString(fields[1])
		if err := errors.Join(kerr, verr); err != nil {
			return Record{}, fmt.Errorf("bad base64: %w", err)
		}
		return Record{Key: string(key), Value: val}, nil
	}
	return Record{}, fmt.Errorf("want key,value or key,value,%s; got %d fields", base64Field, len(fields))
}

func readJSONL(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 128<<20)
	var out []Record
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var j jsonRecord
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			return nil, fmt.Errorf("jsonl line %d: %w", line, err)
		}
		rec, err := fromJSON(j)
		if err != nil {
			return nil, fmt.Errorf("jsonl line %d: %w", line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	return out, nil
}

func fromJSON(j jsonRecord) (Record, error) {
	key, kok := oneOf(j.Key, j.KeyBase64)
	val, vok := oneOf(j.Value, j.ValueBase64)
	if !kok || !vok {
		return Record{}, errors.New(`needs one of "key" and "key_base64", and one of "value" and "value_base64"`)
	}
	return Record{Key: string(key), Value: val}, nil
}

// oneOf returns the bytes of whichever of text and raw is set, and
// whether exactly one is.
func oneOf(text *string, raw []byte) ([]byte, bool) {
	switch {
	case text != nil && raw == nil:
		return []byte(*text), true
	case text == nil && raw != nil:
		return raw, true
	}
	return nil, false
}
