package secret

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/mcpgate/mcpgate/internal/cache"
)

// Defaults for Options.
const (
	DefaultTTL          = 5 * time.Minute
	DefaultMaxStale     = time.Hour
	DefaultRefreshFloor = time.Second
	DefaultLoadTimeout  = 5 * time.Second
	// MaxValueBytes bounds a value (Secrets Manager's own limit is 64 KiB).
	MaxValueBytes = 64 << 10
	// maxEntries bounds the values held; past it, the one used least
	// recently is dropped.
	maxEntries = 4096
)

// SecretsManagerAPI is the part of the Secrets Manager client a Resolver
// uses.
type SecretsManagerAPI interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// SSMAPI is the part of the SSM client a Resolver uses.
type SSMAPI interface {
	GetParameter(context.Context, *ssm.GetParameterInput, ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

var (
	_ SecretsManagerAPI = (*secretsmanager.Client)(nil)
	_ SSMAPI            = (*ssm.Client)(nil)
)

// Options configures a Resolver. The zero value means defaults, with no
// AWS clients and env: references refused.
type Options struct {
	// SecretsManager reads secretsmanager: references; nil refuses them.
	SecretsManager SecretsManagerAPI
	// SSM reads ssm: references; nil refuses them.
	SSM SSMAPI
	// Getenv reads env: references; nil refuses them. Variables named
	// AWS_* are always refused: they hold the process's own credentials.
	Getenv func(string) string
	// TTL is how long a value is reused before it is read again. Zero
	// means DefaultTTL; negative reads every time.
	TTL time.Duration
	// MaxStale is how old a value may be and still be served while reading
	// it fails. Zero means DefaultMaxStale; negative never.
	MaxStale time.Duration
	// RefreshFloor is the least time between two reads of one reference
	// forced by Refresh. Zero means DefaultRefreshFloor. With TTL and
	// MaxStale both negative nothing is kept, and every Refresh reads.
	RefreshFloor time.Duration
	// LoadTimeout bounds one read. Zero means DefaultLoadTimeout.
	LoadTimeout time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Resolver reads and caches secret values. It is safe for concurrent use.
type Resolver struct {
	sm     SecretsManagerAPI
	ssm    SSMAPI
	getenv func(string) string
	opts   Options
	values cache.Loader[string] // by Ref.String
}

// New returns a Resolver.
func New(opts Options) *Resolver {
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxStale == 0 {
		opts.MaxStale = DefaultMaxStale
	}
	if opts.RefreshFloor <= 0 {
		opts.RefreshFloor = DefaultRefreshFloor
	}
	if opts.LoadTimeout <= 0 {
		opts.LoadTimeout = DefaultLoadTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Resolver{sm: opts.SecretsManager, ssm: opts.SSM, getenv: opts.Getenv, opts: opts}
	r.values = cache.Loader[string]{
		Load:        func(ctx context.Context, key string) (string, error) { return r.load(ctx, refOf(key)) },
		TTL:         opts.TTL,
		MaxStale:    opts.MaxStale,
		Max:         maxEntries,
		LoadTimeout: opts.LoadTimeout,
		Now:         opts.Now,
	}
	return r
}

// NewFromConfig returns a Resolver reading Secrets Manager and SSM with
// clients built from cfg on first use (each honours its own
// AWS_ENDPOINT_URL_* variable), so a process that reads no secret pays
// nothing at start. opts.SecretsManager and opts.SSM, if set, are kept.
func NewFromConfig(cfg aws.Config, opts Options) *Resolver {
	if opts.SecretsManager == nil {
		opts.SecretsManager = &lazySecretsManager{client: sync.OnceValue(func() *secretsmanager.Client { return secretsmanager.NewFromConfig(cfg) })}
	}
	if opts.SSM == nil {
		opts.SSM = &lazySSM{client: sync.OnceValue(func() *ssm.Client { return ssm.NewFromConfig(cfg) })}
	}
	return New(opts)
}

// lazySecretsManager builds its client on first use.
type lazySecretsManager struct{ client func() *secretsmanager.Client }

func (l *lazySecretsManager) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	return l.client().GetSecretValue(ctx, in, opts...)
}

// lazySSM builds its client on first use.
type lazySSM struct{ client func() *ssm.Client }

func (l *lazySSM) GetParameter(ctx context.Context, in *ssm.GetParameterInput, opts ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	return l.client().GetParameter(ctx, in, opts...)
}

// Error is a failure to resolve a reference. It never holds the value.
type Error struct {
	// Ref is the reference, as written.
	Ref string
	Err error
}

func (e *Error) Error() string { return "secret " + e.Ref + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ErrDisabled means the Resolver was built without the means to read that
// kind of reference.
var ErrDisabled = errors.New("this kind of reference cannot be read here")

// Resolve returns ref's value: from memory if read within TTL, else from
// one read shared with concurrent callers; if that fails, a value younger
// than MaxStale, else the error. If ctx ends first, Resolve returns at once
// while the read goes on for the others.
func (r *Resolver) Resolve(ctx context.Context, ref Ref) (string, error) {
	if ref.Kind == Env {
		// Always current, and cheap.
		return r.load(ctx, ref)
	}
	v, err := r.values.Get(ctx, ref.String())
	return v, refError(ref, err)
}

// Refresh reads ref again after an upstream refused its value stale (the
// secret may have been rotated), and returns the current value: at once if
// another caller has already read a different one, else from a new read
// unless Refresh read it within RefreshFloor (an upstream that refuses every
// value costs at most one read per RefreshFloor). The read is shared with
// concurrent callers, Resolve's included. The caller retries only if the
// value differs from stale.
func (r *Resolver) Refresh(ctx context.Context, ref Ref, stale string) (string, error) {
	if ref.Kind == Env {
		return r.load(ctx, ref)
	}
	v, err := r.values.Reload(ctx, ref.String(), func(h cache.Held[string]) bool {
		return h.Value != stale || r.opts.Now().Sub(h.Reloaded) < r.opts.RefreshFloor
	})
	return v, refError(ref, err)
}

// refError is err as an *Error naming ref: load's errors are already; the
// caller's cancellation is not.
func refError(ref Ref, err error) error {
	if _, ok := err.(*Error); err == nil || ok {
		return err
	}
	return &Error{Ref: ref.String(), Err: err}
}

// refOf is the reference whose String is key: for every reference ParseRef
// returns, the inverse of String.
func refOf(key string) Ref {
	kind, rest, _ := strings.Cut(key, ":")
	ref := Ref{Kind: Kind(kind), Name: rest}
	if ref.Kind == SecretsManager {
		ref.Name, ref.Key, _ = strings.Cut(rest, "#")
	}
	return ref
}

// load reads ref's value from where it is kept.
func (r *Resolver) load(ctx context.Context, ref Ref) (string, error) {
	fail := func(err error) (string, error) { return "", &Error{Ref: ref.String(), Err: err} }
	var (
		v   string
		err error
	)
	switch ref.Kind {
	case SecretsManager:
		v, err = r.loadSecret(ctx, ref)
	case SSM:
		v, err = r.loadParameter(ctx, ref)
	case Env:
		v, err = r.loadEnv(ref)
	default:
		err = errors.New("unknown kind of reference")
	}
	if err != nil {
		return fail(err)
	}
	if len(v) > MaxValueBytes {
		return fail(fmt.Errorf("value is larger than %d bytes", MaxValueBytes))
	}
	if v == "" {
		return fail(errors.New("value is empty"))
	}
	return v, nil
}

func (r *Resolver) loadSecret(ctx context.Context, ref Ref) (string, error) {
	if r.sm == nil {
		return "", fmt.Errorf("secretsmanager: %w", ErrDisabled)
	}
	out, err := r.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(ref.Name)})
	if err != nil {
		return "", fmt.Errorf("read from Secrets Manager: %w", err)
	}
	var s string
	switch {
	case out.SecretString != nil:
		s = *out.SecretString
	case utf8.Valid(out.SecretBinary):
		s = string(out.SecretBinary)
	default:
		return "", errors.New("the secret holds binary data, not text")
	}
	if ref.Key == "" {
		return s, nil
	}
	return jsonField(s, ref.Key)
}

// jsonField returns one field of a JSON object: a string as it is, a
// number or boolean as written. Its errors never show the secret's text.
func jsonField(s, key string) (string, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if dec.Decode(&obj) != nil || obj == nil {
		return "", fmt.Errorf("the secret is not a JSON object, so it has no key %q", key)
	}
	raw, ok := obj[key]
	if !ok {
		return "", fmt.Errorf("the secret's JSON object has no key %q", key)
	}
	raw = bytes.TrimSpace(raw)
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str, nil
	}
	if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' || raw[0] == 't' || raw[0] == 'f') {
		return string(raw), nil
	}
	return "", fmt.Errorf("the secret's key %q holds neither a string, a number nor a boolean", key)
}

func (r *Resolver) loadParameter(ctx context.Context, ref Ref) (string, error) {
	if r.ssm == nil {
		return "", fmt.Errorf("ssm: %w", ErrDisabled)
	}
	out, err := r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(ref.Name), WithDecryption: aws.Bool(true)})
	if err != nil {
		return "", fmt.Errorf("read from SSM: %w", err)
	}
	if out.Parameter == nil || out.Parameter.Value == nil {
		return "", errors.New("SSM returned no value")
	}
	return *out.Parameter.Value, nil
}

func (r *Resolver) loadEnv(ref Ref) (string, error) {
	if strings.HasPrefix(strings.ToUpper(ref.Name), "AWS_") {
		return "", errors.New("AWS_* variables hold the process's own credentials and are never sent upstream")
	}
	if r.getenv == nil {
		return "", fmt.Errorf("env: %w (env: references are for local development; use secretsmanager: or ssm:)", ErrDisabled)
	}
	v := r.getenv(ref.Name)
	if v == "" {
		return "", errors.New("the variable is not set")
	}
	return v, nil
}
