package auth

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestCredential(t *testing.T) {
	const key = "mcpg_0123456789abcdefghij"
	const sigV4 = "AWS4-HMAC-SHA256 Credential=AKIA/20261202/us-east-1/lambda/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc"
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name   string
		header http.Header
		sigV4  bool
		want   string
		err    string // part of the rejection's reason; "" = no error
	}{
		{"none", h(), false, "", ""},
		{"bearer", h("Authorization", "Bearer "+key), false, key, ""},
		{"bearer, any case", h("Authorization", "bearer "+key), false, key, ""},
		{"X-Api-Key", h("X-Api-Key", key), false, key, ""},
		{"x-litellm-api-key with Bearer", h("x-litellm-api-key", "Bearer "+key), false, key, ""},
		{"x-litellm-api-key bare", h("x-litellm-api-key", key), false, key, ""},
		{"the same key twice", h("Authorization", "Bearer "+key, "X-Api-Key", key), false, key, ""},
		{"an empty X-Api-Key beside a bearer", h("Authorization", "Bearer "+key, "X-Api-Key", ""), false, key, ""},
		{"two different keys", h("Authorization", "Bearer "+key, "X-Api-Key", key+"x"), false, "", "different credentials"},
		{"two different X-Api-Key values", h("X-Api-Key", key, "X-Api-Key", key+"x"), false, "", "different credentials"},
		{"litellm and X-Api-Key disagree", h("x-litellm-api-key", "Bearer "+key, "X-Api-Key", key+"x"), false, "", "different credentials"},
		{"Basic", h("Authorization", "Basic dXNlcjpwYXNz"), false, "", "Bearer scheme"},
		{"bearer without a token", h("Authorization", "Bearer "), false, "", "no bearer token"},
		{"control characters", h("X-Api-Key", "mcpg_abc\x01def0123456789"), false, "", "invalid characters"},
		{"too long", h("X-Api-Key", strings.Repeat("a", maxCredentialLen+1)), false, "", "longer than"},
		// Under AWS_IAM, Authorization carries the SigV4 signature.
		{"SigV4 alone", h("Authorization", sigV4), true, "", ""},
		{"SigV4 and X-Api-Key", h("Authorization", sigV4, "X-Api-Key", key), true, key, ""},
		{"SigV4 scheme without AWS_IAM", h("Authorization", sigV4, "X-Api-Key", key), false, "", "Bearer scheme"},
		{"bearer under AWS_IAM (signature in the query)", h("Authorization", "Bearer "+key), true, key, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := credential(tt.header, tt.sigV4)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Errorf("got %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var rej *RejectedError
			if !errors.As(err, &rej) || !strings.Contains(rej.Reason, tt.err) {
				t.Errorf("err = %v, want a rejection mentioning %q", err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Errorf("the error quotes the credential: %v", err)
			}
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	for s, want := range map[string]bool{
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln":          true,
		"eyJhbGciOiJub25lIn0.e30.":               true,
		"mcpg_abcdefghijklmnopqrstuvwxyz0123456": false,
		"a.b.c":                                  false,
		"eyJ0eXAiOiJKV1QifQ.e30.c2ln":            false, // no alg
		"eyJhbGciOiJSUzI1NiJ9.e30":               false,
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln.x":        false,
	} {
		if got := looksLikeJWT(s); got != want {
			t.Errorf("looksLikeJWT(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestIAMGrants(t *testing.T) {
	grants, err := ParseIAMGrants(`
		arn:aws:sts::123456789012:assumed-role/agents/*=github,search;
		arn:aws:iam::123456789012:user/alice=*`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		arn  string
		want []string
	}{
		{"arn:aws:sts::123456789012:assumed-role/agents/session-1", []string{"github", "search"}},
		{"arn:aws:sts::123456789012:assumed-role/agents/a=b,c@d", []string{"github", "search"}},
		{"arn:aws:sts::123456789012:assumed-role/agents-admin/s", nil},
		{"arn:aws:sts::999999999999:assumed-role/agents/s", nil},
		{"arn:aws:iam::123456789012:user/alice", []string{"*"}},
		{"arn:aws:iam::123456789012:user/alice2", nil},
	}
	for _, tt := range tests {
		p := iamPrincipal(grants, tt.arn)
		switch {
		case tt.want == nil && p != nil:
			t.Errorf("%s: granted %v, want nothing", tt.arn, p.Servers)
		case tt.want != nil && (p == nil || !slices.Equal(p.Servers, tt.want)):
			t.Errorf("%s: got %+v, want servers %v", tt.arn, p, tt.want)
		case p != nil && (p.Kind != KindIAM || !strings.HasPrefix(p.ID, "iam:") || len(p.ID) > MaxIDLen || p.Subject != tt.arn):
			t.Errorf("%s: principal %+v", tt.arn, p)
		}
	}
	for _, bad := range []string{
		"arn:aws:iam::1:user/a",
		"user/a=github",
		"arn:aws:iam::1:user/[=github",
		"arn:aws:iam::1:user/a=git hub",
		"arn:aws:iam::1:user/a=",
	} {
		if _, err := ParseIAMGrants(bad); err == nil {
			t.Errorf("ParseIAMGrants(%q) accepted", bad)
		}
	}
	if g, err := ParseIAMGrants(" ; \n"); err != nil || len(g) != 0 {
		t.Errorf("empty grants: %v, %v", g, err)
	}
}

// TestAuthenticateIAM: under AWS_IAM a caller without a key is its own
// principal only if granted; with a key the key decides, and the IAM
// caller is logged beside it.
func TestAuthenticateIAM(t *testing.T) {
	grants, err := ParseIAMGrants("arn:aws:iam::123456789012:user/alice=demo")
	if err != nil {
		t.Fatal(err)
	}
	a := New(nil, "", Options{IAM: grants})
	sig := http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=x, SignedHeaders=host, Signature=y"}}
	p, err := a.Authenticate(context.Background(), Request{Header: sig, IAMCaller: "arn:aws:iam::123456789012:user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindIAM || !p.Allows("demo") || p.Allows("other") || p.IAMCaller != "arn:aws:iam::123456789012:user/alice" {
		t.Errorf("IAM principal %+v", p)
	}
	_, err = a.Authenticate(context.Background(), Request{Header: sig, IAMCaller: "arn:aws:iam::123456789012:user/bob"})
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrNoCredentials) {
		t.Errorf("IAM caller without a grant: err = %v, want a rejection (no credentials)", err)
	}
	// Without grants (the default), every IAM caller must bring a key.
	a = New(nil, "", Options{})
	if _, err := a.Authenticate(context.Background(), Request{Header: sig, IAMCaller: "arn:aws:iam::123456789012:user/alice"}); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("no grants configured: err = %v, want no credentials", err)
	}
	// Without AWS_IAM a SigV4 Authorization header is just malformed.
	if _, err := a.Authenticate(context.Background(), Request{Header: sig}); !errors.As(err, &rej) {
		t.Errorf("SigV4 header without AWS_IAM: err = %v, want a rejection", err)
	}
}
