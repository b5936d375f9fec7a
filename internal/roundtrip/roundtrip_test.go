package roundtrip

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSealOpen(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	secret := []byte(strings.Repeat("s", MinSecretBytes))
	s, err := New(secret, Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	bind := Binding{Principal: "key:aa", Server: "quotes", Tool: "confirm", Args: Digest([]byte(`{"a": 1, "b": [true, "x"]}`)), Upstream: "u1"}
	sealed, err := s.Seal(bind, "upstream-state-42")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "upstream-state") {
		t.Errorf("sealed state %q shows the upstream's state", sealed)
	}
	got, err := s.Open(sealed, bind)
	if err != nil || got.State != "upstream-state-42" {
		t.Fatalf("Open = %+v, %v; want the upstream's state", got, err)
	}
	got.Done(false) // not sent: it may be used again
	// The same arguments written otherwise are the same call.
	same := bind
	same.Args = Digest([]byte(`{"b":[true,"x"],"a":1}`))
	if got, err := s.Open(sealed, same); err != nil {
		t.Errorf("reordered arguments: %v", err)
	} else {
		got.Done(false)
	}

	other, _ := New([]byte(strings.Repeat("t", MinSecretBytes)), Options{Now: clock})
	flipped := []byte(sealed)
	flipped[len(flipped)-3] ^= 1
	for _, tc := range []struct {
		name  string
		state string
		bind  Binding
		s     *Sealer
		want  error
	}{
		{"tampered", string(flipped), bind, s, ErrMalformed},
		{"appended", sealed + "-TAMPERED", bind, s, ErrMalformed},
		{"foreign", "opaque-upstream-state", bind, s, ErrMalformed},
		{"truncated", sealed[:10], bind, s, ErrMalformed},
		{"oversized", prefix + strings.Repeat("A", MaxStateBytes), bind, s, ErrMalformed},
		{"other key", sealed, bind, other, ErrMalformed},
		{"other principal", sealed, Binding{"key:bb", bind.Server, bind.Tool, bind.Args, bind.Upstream}, s, ErrMismatch},
		{"other server", sealed, Binding{bind.Principal, "other", bind.Tool, bind.Args, bind.Upstream}, s, ErrMismatch},
		{"other tool", sealed, Binding{bind.Principal, bind.Server, "delete", bind.Args, bind.Upstream}, s, ErrMismatch},
		{"other arguments", sealed, Binding{bind.Principal, bind.Server, bind.Tool, Digest([]byte(`{"a":2}`)), bind.Upstream}, s, ErrMismatch},
		{"other upstream", sealed, Binding{bind.Principal, bind.Server, bind.Tool, bind.Args, "u2"}, s, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.s.Open(tc.state, tc.bind)
			var refused *RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, tc.want) {
				t.Fatalf("Open = %+v, %v; want a refusal: %v", got, err, tc.want)
			}
		})
	}

	t.Run("expired", func(t *testing.T) {
		now = now.Add(DefaultTTL - time.Millisecond)
		if got, err := s.Open(sealed, bind); err != nil {
			t.Fatalf("just before expiry: %v", err)
		} else {
			got.Done(false)
		}
		now = now.Add(time.Millisecond)
		if _, err := s.Open(sealed, bind); !errors.Is(err, ErrExpired) {
			t.Fatalf("at expiry: %v, want ErrExpired", err)
		}
	})
}

func TestNewRefusesShortSecret(t *testing.T) {
	if _, err := New([]byte("short"), Options{}); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}

func TestDigest(t *testing.T) {
	if Digest(nil) != Digest([]byte(`{}`)) || Digest([]byte("null")) != Digest([]byte(" { } ")) {
		t.Error("absent, null and empty arguments differ")
	}
	if Digest([]byte(`{"n": 1}`)) == Digest([]byte(`{"n": 1.0}`)) {
		t.Error("numbers written differently digest alike; the upstream may read them differently")
	}
	if Digest([]byte(`{"a":"x"}`)) == Digest([]byte(`{"a":"y"}`)) {
		t.Error("different arguments digest alike")
	}
}

// A state is good for one use: while in use, and once it went upstream,
// it is refused; one that never went upstream may be used again. Used
// states are forgotten once expired, and the oldest past MaxSpent.
func TestSingleUse(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s, err := New([]byte(strings.Repeat("s", MinSecretBytes)), Options{Now: func() time.Time { return now }, MaxSpent: 2})
	if err != nil {
		t.Fatal(err)
	}
	bind := Binding{Principal: "key:aa", Server: "quotes", Tool: "confirm", Args: Digest(nil), Upstream: "u1"}
	seal := func() string {
		st, err := s.Seal(bind, "u")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	open := func(st string) (*Opened, error) { return s.Open(st, bind) }
	a := seal()
	first, err := open(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(a); !errors.Is(err, ErrReplayed) {
		t.Fatalf("while in use: %v, want ErrReplayed", err)
	}
	first.Done(false)
	again, err := open(a)
	if err != nil {
		t.Fatalf("after a use that never went upstream: %v", err)
	}
	again.Done(true)
	if _, err := open(a); !errors.Is(err, ErrReplayed) {
		t.Fatalf("after it went upstream: %v, want ErrReplayed", err)
	}
	// Two more used states push the oldest out of a memory of two.
	for range 2 {
		o, err := open(seal())
		if err != nil {
			t.Fatal(err)
		}
		o.Done(true)
	}
	if o, err := open(a); err != nil {
		t.Errorf("a state forgotten past MaxSpent: %v", err)
	} else {
		o.Done(true)
	}
	s.mu.Lock()
	held := len(s.spent)
	s.mu.Unlock()
	if held > 2 {
		t.Errorf("%d states remembered, want at most MaxSpent, 2", held)
	}
}
