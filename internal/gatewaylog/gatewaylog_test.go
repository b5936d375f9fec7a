package gatewaylog

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestTailReadsWhatWasAppendedAndStartsAgainOnANewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.log")
	write := func(flag int, s string) {
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	tail := &Tail{Path: path}
	read := func() []string {
		var got []string
		if err := tail.Read(func(l string) { got = append(got, l) }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	write(os.O_TRUNC, "a\nb\nhalf")
	if got := read(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first read %q; want a, b (the incomplete line later)", got)
	}
	write(os.O_APPEND, " line\nc\n")
	if got := read(); !slices.Equal(got, []string{"half line", "c"}) {
		t.Fatalf("second read %q; want the completed line and c", got)
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("read with nothing new: %q", got)
	}
	// make dev starts a fresh log: a new, shorter file.
	os.Remove(path)
	write(os.O_TRUNC, "new\n")
	if got := read(); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("read of a new file %q; want new", got)
	}
}

func TestParseAndFilter(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec, ok := Parse(`{"msg":"request","status":429,"code":"AT_CAPACITY","server_id":"s","principal":"key:1a2b3c4d5e6f"}`, at)
	if !ok || !rec.Time.Equal(at) || !rec.Refused() {
		t.Fatalf("Parse: %+v, %v", rec, ok)
	}
	for _, line := range []string{`START RequestId: x`, `{"msg":"listening"}`, `{"_aws":{}}`, `{broken`} {
		if _, ok := Parse(line, at); ok {
			t.Errorf("Parse(%q) took it for a request record", line)
		}
	}
	f := Filter{Server: "s", Principal: "k:1a2b", Codes: []string{"AT_CAPACITY"}}
	if !f.Selects(&rec) || !f.Coded(&rec) {
		t.Error("filter left out a record it names")
	}
	if (Filter{Server: "t"}).Selects(&rec) || (Filter{Since: at.Add(time.Second)}).Selects(&rec) {
		t.Error("filter kept a record of another server, or an older one")
	}
}
