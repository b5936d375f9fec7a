package roundtrip

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultTTL is how long a sealed state is accepted when Options.TTL is
// zero.
const DefaultTTL = 10 * time.Minute

// MaxStateBytes bounds a sealed state a client sends back; anything longer
// is refused without being decoded.
const MaxStateBytes = 256 << 10

// prefix marks the gateway's envelopes (version 1).
const prefix = "mg1."

// info separates this key's use from any other use of the same secret.
const info = "mcpgate requestState v1"

// MinSecretBytes is the shortest secret accepted.
const MinSecretBytes = 32

// Binding is what a state is valid for.
type Binding struct {
	// Principal identifies the caller (for an API key, its hash).
	Principal string
	// Server is the server id.
	Server string
	// Tool is the upstream's tool name.
	Tool string
	// Args is the digest of the call's arguments (see Digest).
	Args string
}

// Options configures a Sealer. The zero value means defaults.
type Options struct {
	// TTL is how long a sealed state stays valid; zero means DefaultTTL.
	TTL time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Sealer seals and opens states with one key.
type Sealer struct {
	aead cipher.AEAD
	ttl  time.Duration
	now  func() time.Time
}

// New returns a Sealer keyed by secret, which every instance of the fleet
// must share. The AES-256 key is derived from it with HKDF-SHA256.
func New(secret []byte, opts Options) (*Sealer, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("request state secret: want at least %d bytes, got %d", MinSecretBytes, len(secret))
	}
	key, err := hkdf.Key(sha256.New, secret, nil, info, 32)
	if err != nil {
		return nil, fmt.Errorf("derive request state key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("request state cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("request state cipher: %w", err)
	}
	s := &Sealer{aead: aead, ttl: opts.TTL, now: opts.Now}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// TTL is how long a sealed state stays valid.
func (s *Sealer) TTL() time.Duration { return s.ttl }

// envelope is what is sealed.
type envelope struct {
	Principal string `json:"p"`
	Server    string `json:"s"`
	Tool      string `json:"t"`
	Args      string `json:"a"`
	Expires   int64  `json:"e"` // Unix ms
	State     string `json:"u"` // the upstream's requestState
}

// Seal returns the state a client echoes back: upstream (the upstream's
// own requestState, possibly empty) bound to b until the TTL passes.
func (s *Sealer) Seal(b Binding, upstream string) (string, error) {
	plain, err := json.Marshal(envelope{
		Principal: b.Principal, Server: b.Server, Tool: b.Tool, Args: b.Args,
		Expires: s.now().Add(s.ttl).UnixMilli(), State: upstream,
	})
	if err != nil {
		return "", fmt.Errorf("encode request state: %w", err)
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("request state nonce: %w", err)
	}
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(info))
	return prefix + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// The reasons a state is refused. Each is wrapped in a *RefusedError.
var (
	ErrMalformed = errors.New("it is not a state this gateway issued, or it was altered")
	ErrExpired   = errors.New("it has expired")
	ErrMismatch  = errors.New("it was issued for another caller, server, tool or arguments")
)

// RefusedError is a state Open refused; its message is safe to show the
// client.
type RefusedError struct{ Reason error }

func (e *RefusedError) Error() string { return "requestState refused: " + e.Reason.Error() }

func (e *RefusedError) Unwrap() error { return e.Reason }

// Open checks a state a client sent back against b and returns the
// upstream's own state.
func (s *Sealer) Open(state string, b Binding) (string, error) {
	refuse := func(reason error) (string, error) { return "", &RefusedError{Reason: reason} }
	body, ok := strings.CutPrefix(state, prefix)
	if !ok || len(state) > MaxStateBytes {
		return refuse(ErrMalformed)
	}
	sealed, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(sealed) < s.aead.NonceSize()+s.aead.Overhead() {
		return refuse(ErrMalformed)
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(info))
	if err != nil {
		return refuse(ErrMalformed)
	}
	var e envelope
	if err := json.Unmarshal(plain, &e); err != nil {
		return refuse(ErrMalformed)
	}
	if !s.now().Before(time.UnixMilli(e.Expires)) {
		return refuse(ErrExpired)
	}
	if e.Principal != b.Principal || e.Server != b.Server || e.Tool != b.Tool || e.Args != b.Args {
		return refuse(ErrMismatch)
	}
	return e.State, nil
}

// Digest returns a digest of a call's arguments that does not depend on
// how they were written: object keys in any order, any spacing. Numbers
// are compared as written.
func Digest(args json.RawMessage) string {
	canon := canonical(args)
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

func canonical(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	// encoding/json writes map keys sorted.
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}
