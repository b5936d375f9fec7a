package main

// TestCognitoTokens checks the gateway against access tokens shaped and
// signed as Amazon Cognito issues them (no aud; client_id; token_use),
// from moto_server's Cognito on loopback: the quick start's settings accept
// the pool's client and refuse another.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// startMoto runs moto_server on a loopback port until the test ends and
// returns its URL.
func startMoto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		missing.Skip(t, "moto_server is not installed (pip install 'moto[server]')")
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", "0")
	storetest.SetParentDeathSignal(cmd)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Running on (http://127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case u := <-addr:
		return u
	case <-time.After(60 * time.Second):
		t.Fatal("moto_server did not start within 60s")
	}
	return ""
}

// cognito calls one Cognito user pools API action on moto.
func cognito(t *testing.T, endpoint, action string, in map[string]any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, endpoint+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AWSCognitoIdentityProviderService."+action)
	// moto reads the service and region from the credential scope.
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261203/us-east-1/cognito-idp/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", action, resp.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	return out
}

func TestCognitoTokens(t *testing.T) {
	moto := startMoto(t)
	pool := cognito(t, moto, "CreateUserPool", map[string]any{"PoolName": "mcpgate"})["UserPool"].(map[string]any)["Id"].(string)
	client := func(name string) string {
		c := cognito(t, moto, "CreateUserPoolClient", map[string]any{
			"UserPoolId": pool, "ClientName": name,
			"ExplicitAuthFlows": []string{"ALLOW_ADMIN_USER_PASSWORD_AUTH"},
		})
		return c["UserPoolClient"].(map[string]any)["ClientId"].(string)
	}
	agents, other := client("agents"), client("other-app")
	cognito(t, moto, "AdminCreateUser", map[string]any{"UserPoolId": pool, "Username": "alice", "MessageAction": "SUPPRESS"})
	cognito(t, moto, "AdminSetUserPassword", map[string]any{"UserPoolId": pool, "Username": "alice", "Password": "Correct-horse-9", "Permanent": true})
	token := func(clientID string) string {
		r := cognito(t, moto, "AdminInitiateAuth", map[string]any{
			"UserPoolId": pool, "ClientId": clientID, "AuthFlow": "ADMIN_USER_PASSWORD_AUTH",
			"AuthParameters": map[string]string{"USERNAME": "alice", "PASSWORD": "Correct-horse-9"},
		})
		return r["AuthenticationResult"].(map[string]any)["AccessToken"].(string)
	}

	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL})
	// The quick start's settings; the keys come from moto's JWKS (the
	// issuer's real host is not reachable from here).
	gw := rig.StartGateway(
		"OAUTH_ISSUER=https://cognito-idp.us-east-1.amazonaws.com/"+pool,
		"OAUTH_JWKS_URL="+moto+"/"+pool+"/.well-known/jwks.json",
		"OAUTH_AUDIENCE="+agents,
		"OAUTH_SCOPE_PREFIX=mcp/")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(tok string) testkit.Response {
		r, err := testkit.Do(ctx, http.MethodPost, gw.URL+"/mcp-rest/tools/call", http.Header{"Authorization": {"Bearer " + tok}},
			map[string]any{"server_id": "demo", "name": "echo", "arguments": map[string]any{"text": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// The pool's own token for the agents' client is valid; it carries
	// only Cognito's default scope, so it is granted no server: 403 with
	// the scope to ask for (proof that signature, issuer and client
	// passed).
	r := call(token(agents))
	if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), string(fault.Forbidden)) ||
		r.Header.Get("WWW-Authenticate") != fmt.Sprintf(`Bearer error="insufficient_scope", scope="mcp/demo", resource_metadata="%s/.well-known/oauth-protected-resource"`, gw.URL) {
		t.Errorf("agents' token: %d %v %s, want 403 insufficient_scope for mcp/demo", r.Status, r.Header, r.Body)
	}
	// A token of the same pool issued to another client is not for us.
	if r := call(token(other)); r.Status != http.StatusUnauthorized || !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("other client's token: %d %v %s, want 401 invalid_token", r.Status, r.Header, r.Body)
	}
	gw.Stop() // every request record read
	if !strings.Contains(gw.Logs(), `"client_id":"`+agents+`"`) {
		t.Errorf("the log does not name the token's client:\n%s", gw.Logs())
	}
}
