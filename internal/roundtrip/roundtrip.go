package roundtrip

import (
	"bytes"
	"container/list"
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
	"sync"
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

// DefaultMaxSpent is how many used states a Sealer remembers, when
// Options.MaxSpent is zero.
const DefaultMaxSpent = 1 << 16

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
	// Upstream identifies the upstream the state is for (say, a digest of
	// its URL and credential reference): a server id pointed elsewhere
	// within the TTL never sends the old upstream's state to the new one.
	Upstream string
}

// Options configures a Sealer. The zero value means defaults.
type Options struct {
	// TTL is how long a sealed state stays valid; zero means DefaultTTL.
	TTL time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// MaxSpent bounds how many used states are remembered (and refused)
	// until they expire; past it the oldest are forgotten. Zero means
	// DefaultMaxSpent.
	MaxSpent int
}

// Sealer seals and opens states with one key. A state it opens is good
// for one use on this Sealer: see Open.
type Sealer struct {
	aead cipher.AEAD
	ttl  time.Duration
	now  func() time.Time

	mu       sync.Mutex
	maxSpent int
	spent    map[string]*list.Element // by the state's nonce: in use or used
	order    list.List                // of *use, oldest first
}

// use is a state in use or used, until it expires.
type use struct {
	id      string
	expires time.Time
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
	s := &Sealer{aead: aead, ttl: opts.TTL, now: opts.Now, maxSpent: opts.MaxSpent, spent: map[string]*list.Element{}}
	if s.maxSpent <= 0 {
		s.maxSpent = DefaultMaxSpent
	}
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
	Upstream  string `json:"i"`
	Expires   int64  `json:"e"` // Unix ms
	State     string `json:"u"` // the upstream's requestState
}

// Seal returns the state a client echoes back: upstream (the upstream's
// own requestState, possibly empty) bound to b until the TTL passes.
func (s *Sealer) Seal(b Binding, upstream string) (string, error) {
	plain, err := json.Marshal(envelope{
		Principal: b.Principal, Server: b.Server, Tool: b.Tool, Args: b.Args, Upstream: b.Upstream,
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
	ErrMismatch  = errors.New("it was issued for another caller, server, tool, arguments or upstream")
	ErrReplayed  = errors.New("it was used already")
)

// RefusedError is a state Open refused; its message is safe to show the
// client.
type RefusedError struct{ Reason error }

func (e *RefusedError) Error() string { return "requestState refused: " + e.Reason.Error() }

func (e *RefusedError) Unwrap() error { return e.Reason }

// Opened is a state Open accepted, held for its one use until Done.
type Opened struct {
	// State is the upstream's own requestState.
	State string
	s     *Sealer
	id    string
}

// Done ends the use Open began. sent says whether the state went to the
// upstream: if so it is spent, and refused until it expires; if not (the
// call was refused or shed before it was sent), it may be used again.
func (o *Opened) Done(sent bool) {
	if sent {
		return
	}
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if el, ok := o.s.spent[o.id]; ok {
		o.s.order.Remove(el)
		delete(o.s.spent, o.id)
	}
}

// Open checks a state a client sent back against b and returns the
// upstream's own state. The state is then in use, and refused with
// ErrReplayed until Done says it was not sent; once sent, until it
// expires. That memory is this Sealer's alone (one process): a state
// replayed on another instance of the fleet is not recognised as used.
func (s *Sealer) Open(state string, b Binding) (*Opened, error) {
	refuse := func(reason error) (*Opened, error) { return nil, &RefusedError{Reason: reason} }
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
	now := s.now()
	expires := time.UnixMilli(e.Expires)
	if !now.Before(expires) {
		return refuse(ErrExpired)
	}
	if e.Principal != b.Principal || e.Server != b.Server || e.Tool != b.Tool || e.Args != b.Args || e.Upstream != b.Upstream {
		return refuse(ErrMismatch)
	}
	// The nonce is random per Seal: it names this state.
	id := string(sealed[:n])
	if !s.begin(id, expires, now) {
		return refuse(ErrReplayed)
	}
	return &Opened{State: e.State, s: s, id: id}, nil
}

// begin marks state id in use until expires, unless it is in use or
// used already; it forgets expired states, and the oldest ones past
// maxSpent.
func (s *Sealer) begin(id string, expires, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for el := s.order.Front(); el != nil && (len(s.spent) >= s.maxSpent || !now.Before(el.Value.(*use).expires)); el = s.order.Front() {
		s.order.Remove(el)
		delete(s.spent, el.Value.(*use).id)
	}
	if _, ok := s.spent[id]; ok {
		return false
	}
	s.spent[id] = s.order.PushBack(&use{id: id, expires: expires})
	return true
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
