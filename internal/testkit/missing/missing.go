// Package missing handles a test whose outside program is not installed
// (dynalite, moto_server, a python3 module, a Node package, a tool): under
// CI (CI=true) the test fails, so a CI run can never pass by skipping;
// elsewhere it skips, and says so where a person sees it.
//
// A skip's message shows only with go test -v: a package whose tests all
// skipped prints "ok" like one whose tests ran. So the first skip of each
// cause in a test binary also writes one line to the terminal (/dev/tty),
// which go test does not capture, or, without one, to standard error:
//
//	--- SKIPPED (missing): moto_server: python3 moto is not installed (pip install 'moto[server]'); tests of secret that need it did not run
package missing

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Skip skips t because what (a sentence saying what is missing and how to
// install it) is not installed, or fails t under CI.
func Skip(t testing.TB, what string) {
	t.Helper()
	skip(t, what, InCI(), terminal)
}

// InCI reports whether the tests run under CI: CI is set, and not to
// "false" or "0".
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

var (
	mu        sync.Mutex
	announced = map[string]bool{}
)

func skip(t testing.TB, what string, ci bool, out func() io.WriteCloser) {
	t.Helper()
	if ci {
		t.Fatalf("%s (under CI a missing program fails the test)", what)
		return
	}
	mu.Lock()
	first := !announced[what]
	announced[what] = true
	mu.Unlock()
	if first {
		w := out()
		fmt.Fprintf(w, "--- SKIPPED (missing): %s; tests of %s that need it did not run\n", what, binary())
		w.Close()
	}
	t.Skipf("skipping: %s", what)
}

// terminal is the controlling terminal, which go test leaves alone, or
// standard error when there is none (CI, an editor running the tests).
func terminal() io.WriteCloser {
	if f, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return f
	}
	return nopCloser{os.Stderr}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// binary names the package under test by its test binary ("secret.test").
func binary() string {
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}
