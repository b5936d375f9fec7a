package main

import (
	"encoding/json"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// How LiteLLM's upstream identity settings become a server's auth,
// static_headers, forward_headers and tool filters. A credential's value is
// never written: an os.environ/X reference becomes env:X (local
// development only, with a note to move it to Secrets Manager), and a
// literal becomes a reference to a Secrets Manager secret the admin creates
// with the printed command, with a placeholder where the value goes.

// liteLLMIdentity are the settings mapIdentity reads.
var liteLLMIdentity = []string{
	"auth_type", "authentication_token", "auth_value", "client_id", "client_secret", "token_url", "scopes", "audience",
	"aws_service_name", "aws_region_name", "static_headers", "extra_headers", "allowed_tools", "disallowed_tools",
}

// liteLLMAuth maps LiteLLM's auth_type to the auth type, header and the
// form the secret's value must take.
var liteLLMAuth = map[string]struct {
	typ, header, form string
}{
	"bearer_token":  {"bearer", "", "the token"},
	"api_key":       {"api_key", "", "the key"},
	"basic":         {"basic", "", "user:password"},
	"authorization": {"header", "Authorization", "the whole Authorization value"},
	"token":         {"header", "Authorization", `"token " and the token`},
}

// secretPrefix is where imported secrets are expected, the template's
// default SecretsPrefix.
const secretPrefix = "mcpgate/"

// mapIdentity maps the identity settings of one LiteLLM server into doc.
func (p *planned) mapIdentity(settings map[string]any, doc map[string]any) {
	used := map[string]bool{}
	take := func(k string) (any, bool) {
		v, ok := settings[k]
		if ok {
			used[k] = true
		}
		return v, ok
	}
	p.mapAuth(settings, doc, take)
	if v, ok := take("static_headers"); ok {
		p.mapStaticHeaders(v, doc)
	}
	if v, ok := take("extra_headers"); ok {
		p.mapForwardHeaders(v, doc)
	}
	for _, k := range []string{"allowed_tools", "disallowed_tools"} {
		if v, ok := take(k); ok {
			if list, ok := stringList(v); ok && len(list) > 0 {
				doc[k] = list
			} else if !ok || isEnvRef(v) {
				p.unmapped = append(p.unmapped, k+" (not a list of tool names)")
			}
		}
	}
	// Credential settings of another auth type, or without one.
	for _, k := range liteLLMIdentity {
		if _, ok := settings[k]; ok && !used[k] {
			p.unmapped = append(p.unmapped, k)
		}
	}
}

func (p *planned) mapAuth(settings map[string]any, doc map[string]any, take func(string) (any, bool)) {
	t, ok := take("auth_type")
	if !ok {
		return
	}
	typ, _ := t.(string)
	switch typ {
	case "none", "":
		return
	case "oauth2":
		p.mapOAuth2(doc, take)
		return
	case "aws_sigv4":
		svc, _ := take("aws_service_name")
		service, _ := svc.(string)
		if service == "" || isEnvRef(svc) {
			p.unmapped = append(p.unmapped, "auth_type (aws_sigv4 without a literal aws_service_name)")
			return
		}
		a := map[string]any{"type": "aws_sigv4", "service": service}
		if r, ok := take("aws_region_name"); ok && !isEnvRef(r) {
			a["region"] = r
		}
		doc["auth"] = a
		p.notes = append(p.notes, "auth: aws_sigv4 signs with the gateway's own role; grant it permission to invoke the upstream")
		return
	}
	m, known := liteLLMAuth[typ]
	if !known {
		p.unmapped = append(p.unmapped, fmt.Sprintf("auth_type (%s has no equivalent)", clip.String(typ, 40)))
		return
	}
	v, ok := take("authentication_token")
	if !ok {
		v, ok = take("auth_value")
	} else {
		take("auth_value")
	}
	if !ok {
		p.unmapped = append(p.unmapped, "auth_type (no authentication_token)")
		return
	}
	a := map[string]any{"type": m.typ, "secret": p.secretRef(v)}
	if m.header != "" {
		a["header"] = m.header
	}
	doc["auth"] = a
	p.noteSecret(a, m.form)
}

func (p *planned) mapOAuth2(doc map[string]any, take func(string) (any, bool)) {
	id, _ := take("client_id")
	sec, hasSecret := take("client_secret")
	url, _ := take("token_url")
	clientID, _ := id.(string)
	tokenURL, _ := url.(string)
	if clientID == "" || tokenURL == "" || !hasSecret || isEnvRef(id) || isEnvRef(url) {
		p.unmapped = append(p.unmapped, "auth_type (oauth2 without literal client_id and token_url and a client_secret: only the client credentials grant maps)")
		return
	}
	a := map[string]any{"type": "oauth2_client_credentials", "client_id": clientID, "token_url": tokenURL,
		"secret": p.secretRef(sec)}
	if v, ok := take("scopes"); ok {
		if list, ok := stringList(v); ok {
			a["scope"] = strings.Join(list, " ")
		} else if s, ok := v.(string); ok && !isEnvRef(v) {
			a["scope"] = s
		}
	}
	if v, ok := take("audience"); ok && !isEnvRef(v) {
		a["audience"] = v
	}
	doc["auth"] = a
	p.noteSecret(a, "the client secret")
}

// secretRef turns a credential setting into a reference, never keeping a
// literal value: env:VAR for an os.environ/VAR setting, else the server's
// Secrets Manager secret (secretPrefix + id), to be created.
func (p *planned) secretRef(v any) string {
	if s, ok := v.(string); ok && isEnvRef(v) {
		return "env:" + strings.TrimPrefix(s, "os.environ/")
	}
	return "secretsmanager:" + secretPrefix + p.id
}

// noteSecret says how to create the secret auth refers to (its value is
// form), and for an env: reference, how to move it to Secrets Manager:
// commands to paste, the second setting the whole auth as it would be.
func (p *planned) noteSecret(auth map[string]any, form string) {
	name := secretPrefix + p.id
	create := fmt.Sprintf("aws secretsmanager create-secret --name %s --secret-string '<%s>'", name, form)
	ref, _ := auth["secret"].(string)
	env, isEnv := strings.CutPrefix(ref, "env:")
	if !isEnv {
		p.notes = append(p.notes, fmt.Sprintf("auth.secret is %s; the config's literal value is not imported: create the secret with %s", ref, create))
		return
	}
	moved := maps.Clone(auth)
	moved["secret"] = "secretsmanager:" + name
	js, _ := json.Marshal(moved)
	p.notes = append(p.notes, fmt.Sprintf("auth.secret is env:%s, read from the gateway's environment: for local development only (refused under Lambda); to move it to Secrets Manager: %s, then: mcpgate servers set %s %s",
		env, create, p.id, shellQuote("auth="+string(js))))
}

// mapStaticHeaders keeps literal, non-credential static headers.
func (p *planned) mapStaticHeaders(v any, doc map[string]any) {
	m, ok := v.(map[string]any)
	if !ok {
		p.unmapped = append(p.unmapped, "static_headers (not a mapping)")
		return
	}
	out := map[string]any{}
	for _, h := range slices.Sorted(maps.Keys(m)) {
		switch c := http.CanonicalHeaderKey(h); {
		case registry.NeverForwarded(c):
			p.unmapped = append(p.unmapped, "static_headers."+h+" (a credential or protocol header; a credential goes in auth as a secret reference)")
		case isEnvRef(m[h]):
			p.unmapped = append(p.unmapped, "static_headers."+h+" (an os.environ/ reference; not resolved)")
		default:
			out[h] = fmt.Sprint(m[h])
		}
	}
	if len(out) > 0 {
		doc["static_headers"] = out
	}
}

// mapForwardHeaders keeps the extra_headers a gateway may forward.
func (p *planned) mapForwardHeaders(v any, doc map[string]any) {
	list, ok := stringList(v)
	if !ok {
		p.unmapped = append(p.unmapped, "extra_headers (not a list of header names)")
		return
	}
	var out []any
	for _, h := range list {
		if registry.NeverForwarded(h) {
			p.unmapped = append(p.unmapped, "extra_headers "+h+" (never forwarded: an agent's credential must not reach an upstream)")
			continue
		}
		out = append(out, h)
	}
	if len(out) > 0 {
		doc["forward_headers"] = out
	}
}

// stringList reads a YAML list of strings.
func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
