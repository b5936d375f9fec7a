package secret_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	secrettest.StopShared()
	os.Exit(code)
}

func TestParseRef(t *testing.T) {
	good := []struct {
		in   string
		want secret.Ref
	}{
		{"secretsmanager:mcpgate/github", secret.Ref{Kind: secret.SecretsManager, Name: "mcpgate/github"}},
		{"secretsmanager:mcpgate/oauth#client_secret", secret.Ref{Kind: secret.SecretsManager, Name: "mcpgate/oauth", Key: "client_secret"}},
		{"secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpgate/x-AbCdEf#k", secret.Ref{Kind: secret.SecretsManager, Name: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpgate/x-AbCdEf", Key: "k"}},
		{"ssm:/mcpgate/token", secret.Ref{Kind: secret.SSM, Name: "/mcpgate/token"}},
		{"ssm:arn:aws:ssm:us-east-1:123456789012:parameter/mcpgate/token", secret.Ref{Kind: secret.SSM, Name: "arn:aws:ssm:us-east-1:123456789012:parameter/mcpgate/token"}},
		{"env:GITHUB_TOKEN", secret.Ref{Kind: secret.Env, Name: "GITHUB_TOKEN"}},
	}
	for _, c := range good {
		got, err := secret.ParseRef(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if got.String() != c.in {
			t.Errorf("ParseRef(%q).String() = %q", c.in, got.String())
		}
	}
	bad := []string{
		"", "ghp_FAKESECRET0123456789", "Bearer FAKESECRET", "user:FAKESECRET", "secretsmanager:",
		"secretsmanager:name#", "secretsmanager:bad name FAKESECRET", "ssm:", "ssm:/a#FAKESECRET",
		"env:", "env:1FAKESECRET", "env:A-B", "vault:FAKESECRET",
	}
	bad = append(bad, "secretsmanager:"+strings.Repeat("n", 513), "env:"+strings.Repeat("V", 129))
	if _, err := secret.ParseRef("secretsmanager:" + strings.Repeat("n", 512)); err != nil {
		t.Errorf("a 512-character secret name: %v", err)
	}
	for _, in := range bad {
		_, err := secret.ParseRef(in)
		if err == nil {
			t.Errorf("ParseRef(%q) accepted", in)
			continue
		}
		if strings.Contains(err.Error(), "FAKESECRET") {
			t.Errorf("ParseRef(%q) error shows its input: %v", in, err)
		}
	}
}

// counting counts the reads that reach the real services, and can make them
// fail.
type counting struct {
	sm    secret.SecretsManagerAPI
	ssm   secret.SSMAPI
	reads atomic.Int64
	fail  atomic.Bool
}

var errDown = errors.New("service unavailable (injected)")

func (c *counting) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.reads.Add(1)
	if c.fail.Load() {
		return nil, errDown
	}
	return c.sm.GetSecretValue(ctx, in, opts...)
}

func (c *counting) GetParameter(ctx context.Context, in *ssm.GetParameterInput, opts ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	c.reads.Add(1)
	if c.fail.Load() {
		return nil, errDown
	}
	return c.ssm.GetParameter(ctx, in, opts...)
}

// clock is a settable time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func setup(t *testing.T, opts secret.Options) (*secrettest.Server, *counting, *clock, *secret.Resolver) {
	t.Helper()
	s := secrettest.Shared(t)
	c := &counting{sm: s.SecretsManager(), ssm: s.SSM()}
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	opts.SecretsManager, opts.SSM, opts.Now = c, c, clk.Now
	return s, c, clk, secret.New(opts)
}

func mustRef(t *testing.T, s string) secret.Ref {
	t.Helper()
	r, err := secret.ParseRef(s)
	if err != nil {
		t.Fatalf("ParseRef(%q): %v", s, err)
	}
	return r
}

func TestResolveEachKind(t *testing.T) {
	s, _, _, res := setup(t, secret.Options{Getenv: func(name string) string {
		return map[string]string{"DEV_TOKEN": "dev-value-1"}[name]
	}})
	plain := secrettest.Name("plain")
	arn := s.PutSecret(t, plain, "sm-value-1")
	doc := secrettest.Name("doc")
	s.PutSecret(t, doc, `{"client_secret": "sm-json-value", "port": 8443, "nested": {"a": 1}}`)
	param := "/" + secrettest.Name("param")
	s.PutParameter(t, param, "ssm-value-1")

	ctx := context.Background()
	for ref, want := range map[string]string{
		"secretsmanager:" + plain:                                  "sm-value-1",
		"secretsmanager:" + arn:                                    "sm-value-1",
		"secretsmanager:" + doc + "#client_secret":                 "sm-json-value",
		"secretsmanager:" + doc + "#port":                          "8443",
		"ssm:" + param:                                             "ssm-value-1",
		"ssm:arn:aws:ssm:us-east-1:123456789012:parameter" + param: "ssm-value-1",
		"env:DEV_TOKEN":                                            "dev-value-1",
	} {
		got, err := res.Resolve(ctx, mustRef(t, ref))
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", ref, got, err, want)
		}
	}
}

func TestResolveErrorsNeverShowValues(t *testing.T) {
	s, _, _, res := setup(t, secret.Options{Getenv: func(string) string { return "FAKESECRET-env" }})
	notJSON := secrettest.Name("notjson")
	s.PutSecret(t, notJSON, "FAKESECRET-not-json{")
	obj := secrettest.Name("obj")
	s.PutSecret(t, obj, `{"k": {"FAKESECRET": 1}, "other": "FAKESECRET-other"}`)
	ctx := context.Background()
	for _, c := range []struct{ ref, says string }{
		{"secretsmanager:" + notJSON + "#k", "is not a JSON object"},
		{"secretsmanager:" + obj + "#k", "neither a string"},
		{"secretsmanager:" + obj + "#missing", `no key "missing"`},
		{"secretsmanager:" + secrettest.Name("absent"), "ResourceNotFound"},
		{"ssm:/" + secrettest.Name("absent"), "ParameterNotFound"},
		{"env:AWS_SECRET_ACCESS_KEY", "AWS_* variables"},
	} {
		_, err := res.Resolve(ctx, mustRef(t, c.ref))
		if err == nil {
			t.Errorf("Resolve(%s) succeeded", c.ref)
			continue
		}
		if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), c.ref) {
			t.Errorf("Resolve(%s) error %q does not name the reference and say %q", c.ref, err, c.says)
		}
		if strings.Contains(err.Error(), "FAKESECRET") {
			t.Errorf("Resolve(%s) error shows the value: %v", c.ref, err)
		}
	}
	// A value past MaxValueBytes is refused.
	big := secret.New(secret.Options{Getenv: func(string) string { return strings.Repeat("x", secret.MaxValueBytes+1) }})
	if _, err := big.Resolve(ctx, mustRef(t, "env:BIG")); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a value past the bound: %v", err)
	}
	// Without the means to read a kind, it is refused.
	none := secret.New(secret.Options{})
	for _, ref := range []string{"secretsmanager:x", "ssm:/x", "env:X"} {
		if _, err := none.Resolve(ctx, mustRef(t, ref)); !errors.Is(err, secret.ErrDisabled) {
			t.Errorf("Resolve(%s) without a client: %v, want ErrDisabled", ref, err)
		}
	}
}

func TestResolveCachesAndSharesOneRead(t *testing.T) {
	s, c, clk, res := setup(t, secret.Options{})
	name := secrettest.Name("shared")
	s.PutSecret(t, name, "v1")
	ref := mustRef(t, "secretsmanager:"+name)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if v, err := res.Resolve(ctx, ref); err != nil || v != "v1" {
				t.Errorf("Resolve = %q, %v", v, err)
			}
		})
	}
	wg.Wait()
	if n := c.reads.Load(); n != 1 {
		t.Fatalf("20 concurrent first reads made %d requests, want 1", n)
	}
	clk.Advance(secret.DefaultTTL - time.Second)
	if _, err := res.Resolve(ctx, ref); err != nil || c.reads.Load() != 1 {
		t.Fatalf("within the TTL: %v, %d requests; want served from memory", err, c.reads.Load())
	}
	s.RotateSecret(t, name, "v2")
	clk.Advance(2 * time.Second)
	if v, err := res.Resolve(ctx, ref); err != nil || v != "v2" || c.reads.Load() != 2 {
		t.Fatalf("after the TTL: %q, %v, %d requests; want v2 from one new read", v, err, c.reads.Load())
	}
}

func TestResolveServesStaleWhileReadsFail(t *testing.T) {
	s, c, clk, res := setup(t, secret.Options{})
	name := secrettest.Name("stale")
	s.PutSecret(t, name, "v1")
	ref := mustRef(t, "secretsmanager:"+name)
	ctx := context.Background()
	if _, err := res.Resolve(ctx, ref); err != nil {
		t.Fatal(err)
	}
	c.fail.Store(true)
	clk.Advance(secret.DefaultTTL + time.Minute)
	if v, err := res.Resolve(ctx, ref); err != nil || v != "v1" {
		t.Fatalf("while Secrets Manager fails: %q, %v; want the last value", v, err)
	}
	clk.Advance(secret.DefaultMaxStale)
	if _, err := res.Resolve(ctx, ref); !errors.Is(err, errDown) {
		t.Fatalf("past MaxStale: %v, want the read's error", err)
	}
}

func TestRefreshAfterRotation(t *testing.T) {
	s, c, clk, res := setup(t, secret.Options{})
	name := secrettest.Name("rotate")
	s.PutSecret(t, name, "old")
	ref := mustRef(t, "secretsmanager:"+name)
	ctx := context.Background()
	if _, err := res.Resolve(ctx, ref); err != nil {
		t.Fatal(err)
	}
	s.RotateSecret(t, name, "new")
	if v, _ := res.Resolve(ctx, ref); v != "old" {
		t.Fatalf("Resolve after rotation, within the TTL = %q, want the cached old value", v)
	}
	// Ten calls refused at once: one read between them, even right after
	// the ordinary read.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := res.Refresh(ctx, ref, "old"); err != nil || v != "new" {
				t.Errorf("Refresh = %q, %v; want new", v, err)
			}
		})
	}
	wg.Wait()
	if n := c.reads.Load(); n != 2 {
		t.Fatalf("10 concurrent refreshes made %d reads in all, want 2", n)
	}
	// Refused again with the new value, within the floor: nothing to read.
	if v, _ := res.Refresh(ctx, ref, "new"); v != "new" || c.reads.Load() != 2 {
		t.Fatalf("Refresh of the new value within the floor = %q, %d reads", v, c.reads.Load())
	}
	clk.Advance(secret.DefaultRefreshFloor)
	if v, _ := res.Refresh(ctx, ref, "new"); v != "new" || c.reads.Load() != 3 {
		t.Fatalf("Refresh of the new value after the floor = %q, %d reads; want one read", v, c.reads.Load())
	}
	if v, _ := res.Resolve(ctx, ref); v != "new" || c.reads.Load() != 3 {
		t.Fatalf("Resolve after Refresh = %q, %d reads; want the refreshed value from memory", v, c.reads.Load())
	}
}

// byName answers every secret with its own name, and counts the reads of
// each.
type byName struct {
	mu    sync.Mutex
	reads map[string]int
}

func (b *byName) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads[*in.SecretId]++
	return &secretsmanager.GetSecretValueOutput{SecretString: in.SecretId}, nil
}

func (b *byName) count(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads[name]
}

// The values held are bounded, and past the bound the one used least
// recently is dropped: a flood of new references (three times the bound)
// neither evicts a value in use nor makes it cost a read again.
func TestFloodOfReferencesKeepsValuesInUse(t *testing.T) {
	sm := &byName{reads: map[string]int{}}
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	res := secret.New(secret.Options{SecretsManager: sm, Now: clk.Now})
	ctx := context.Background()
	resolve := func(name string) {
		t.Helper()
		if v, err := res.Resolve(ctx, mustRef(t, "secretsmanager:"+name)); err != nil || v != name {
			t.Fatalf("Resolve(%s) = %q, %v", name, v, err)
		}
	}
	resolve("in-use")
	const flood = 3 * 4096
	for i := range flood {
		resolve("flood-" + strconv.Itoa(i))
		if i%64 == 0 {
			resolve("in-use")
		}
	}
	if n := sm.count("in-use"); n != 1 {
		t.Errorf("the reference in use was read %d times during the flood, want 1", n)
	}
	last := "flood-" + strconv.Itoa(flood-1)
	if resolve(last); sm.count(last) != 1 {
		t.Errorf("a reference just used was read %d times, want 1", sm.count(last))
	}
	if resolve("flood-0"); sm.count("flood-0") != 2 {
		t.Errorf("the reference used least recently was read %d times, want 2: the values held are not bounded", sm.count("flood-0"))
	}
}

// held answers after release, and counts its reads.
type held struct {
	reads   atomic.Int64
	started chan struct{}
	release chan struct{}
}

func (h *held) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	h.reads.Add(1)
	h.started <- struct{}{}
	<-h.release
	return &secretsmanager.GetSecretValueOutput{SecretString: in.SecretId}, nil
}

// A caller that gives up returns at once with an error naming the
// reference; the read goes on, and its value serves the callers after.
func TestResolveReturnsWhenCallerGivesUp(t *testing.T) {
	sm := &held{started: make(chan struct{}, 1), release: make(chan struct{})}
	res := secret.New(secret.Options{SecretsManager: sm})
	ref := mustRef(t, "secretsmanager:slow")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := res.Resolve(ctx, ref)
		done <- err
	}()
	<-sm.started
	cancel()
	err := <-done
	var serr *secret.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &serr) || serr.Ref != ref.String() {
		t.Fatalf("Resolve given up: %v, want a *secret.Error naming the reference, of context.Canceled", err)
	}
	close(sm.release)
	if v, err := res.Resolve(context.Background(), ref); err != nil || v != "slow" || sm.reads.Load() != 1 {
		t.Fatalf("after the read = %q, %v, %d reads; want its value from that one read", v, err, sm.reads.Load())
	}
}
