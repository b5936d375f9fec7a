package missing

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skipf and Fatalf instead of
// stopping the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = format }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = format }

type buffer struct{ bytes.Buffer }

func (*buffer) Close() error { return nil }

// TestSkipSaysSoOnce: locally a missing program skips the test and is
// announced once per cause, on the writer a person sees; under CI it
// fails the test, and nothing is skipped.
func TestSkipSaysSoOnce(t *testing.T) {
	var out buffer
	to := func() io.WriteCloser { return &out }
	const what = "frobnicator is not installed (apt-get install frobnicator)"
	for range 3 {
		r := &recorder{TB: t}
		skip(r, what, false, to)
		if r.skipped == "" || r.failed != "" {
			t.Errorf("locally: skipped %q, failed %q; want a skip", r.skipped, r.failed)
		}
	}
	if got := strings.Count(out.String(), "--- SKIPPED (missing): "+what); got != 1 {
		t.Errorf("announced %d times, want once:\n%s", got, out.String())
	}
	r := &recorder{TB: t}
	skip(r, "another tool is not installed", false, to)
	if !strings.Contains(out.String(), "another tool is not installed") {
		t.Errorf("a second cause is not announced:\n%s", out.String())
	}

	out.Reset()
	r = &recorder{TB: t}
	skip(r, what, true, to)
	if r.failed == "" || r.skipped != "" || out.Len() != 0 {
		t.Errorf("under CI: skipped %q, failed %q, printed %q; want a failure", r.skipped, r.failed, out.String())
	}
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "1": true, "false": false, "0": false, "yes": true} {
		t.Setenv("CI", v)
		if got := InCI(); got != want {
			t.Errorf("CI=%q: InCI %v, want %v", v, got, want)
		}
	}
}
