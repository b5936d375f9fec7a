package main

// TestThirdPartyClient drives a gateway process with a client the project
// did not write: the official TypeScript SDK (infra/clients/mcp-client.mjs),
// on the aggregated /mcp and on the passthrough /mcp/{server_id}.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth/authtest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// tsCall is one tools/call the script makes, and what it printed for it.
type tsCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments,omitempty"`
	Result    *struct {
		Content []struct{ Type, Text string } `json:"content"`
		IsError bool                          `json:"isError"`
	} `json:"result,omitempty"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type tsOutput struct {
	Server struct{ Name, Version string } `json:"server"`
	Tools  []string                       `json:"tools"`
	Calls  []tsCall                       `json:"calls"`
}

// runTSClient runs the script against url with key (and extra
// environment); it returns what the script printed, or its exit error and
// output.
func runTSClient(t *testing.T, url, key string, calls []tsCall, env ...string) (tsOutput, string, error) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing.Skip(t, "node is not installed")
	}
	infraFile(t, "@modelcontextprotocol/sdk/package.json")
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(map[string]any{"url": url, "calls": calls})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "infra", "clients", "mcp-client.mjs"), string(in))
	cmd.Env = append(append(os.Environ(), "MCP_BEARER_KEY="+key), env...)
	cmd.WaitDelay = 5 * time.Second
	storetest.SetParentDeathSignal(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	output := "stdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String()
	var out tsOutput
	if err == nil {
		if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
			t.Fatalf("client output is not JSON: %v\n%s", jerr, output)
		}
	}
	return out, output, err
}

func TestThirdPartyClient(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 2})
	key := rig.PutKey("demo")
	gw := rig.StartGateway()

	for _, tc := range []struct{ name, path, prefix string }{
		{"aggregated", "/mcp", "demo-"},
		{"passthrough", "/mcp/demo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, output, err := runTSClient(t, gw.URL+tc.path, key, []tsCall{
				{Name: tc.prefix + "echo", Arguments: map[string]any{"text": "hello from the TypeScript SDK"}},
				{Name: tc.prefix + "fail_tool"},
				{Name: tc.prefix + "no_such_tool"},
			})
			if err != nil {
				t.Fatalf("client: %v\n%s", err, output)
			}
			defer func() {
				if t.Failed() {
					t.Logf("client output:\n%s", output)
				}
			}()
			slices.Sort(out.Tools)
			if want := []string{tc.prefix + "echo", tc.prefix + "fail_tool", tc.prefix + "slow_tool"}; !slices.Equal(out.Tools, want) {
				t.Errorf("tools %q, want %q", out.Tools, want)
			}
			if len(out.Calls) != 3 {
				t.Fatalf("got %d call results, want 3", len(out.Calls))
			}
			echo, fail, unknown := out.Calls[0], out.Calls[1], out.Calls[2]
			if echo.Result == nil || echo.Result.IsError || len(echo.Result.Content) != 1 || echo.Result.Content[0].Text != "hello from the TypeScript SDK" {
				t.Errorf("echo: got %+v, want its text back", echo)
			}
			if fail.Result == nil || !fail.Result.IsError || len(fail.Result.Content) == 0 || fail.Result.Content[0].Text != "the tool failed on purpose" {
				t.Errorf("fail_tool: got %+v, want a result with isError and the tool's text", fail)
			}
			// An unknown tool is the caller's mistake: a protocol error
			// (invalid params), not a tool result.
			if unknown.Error == nil || unknown.Error.Code != -32602 {
				t.Errorf("no_such_tool: got %+v, want JSON-RPC error -32602", unknown)
			}
		})
	}

	t.Run("no key", func(t *testing.T) {
		_, output, err := runTSClient(t, gw.URL+"/mcp", "", nil)
		if err == nil || !strings.Contains(output, "UNAUTHORIZED") {
			t.Errorf("client without a key: %v; want it refused with UNAUTHORIZED\n%s", err, output)
		}
	})
}

// TestThirdPartyOAuthClient: the TypeScript SDK as an OAuth client
// (client credentials) finds the authorization server through the
// gateway's protected-resource metadata, gets a token for the resource it
// asked for, and calls a tool with it; the gateway logs its principal.
func TestThirdPartyOAuthClient(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 2})
	iss := authtest.NewIssuer(t)
	iss.AddClient("agent-7", "s3cret-client-secret")
	gw := rig.StartGateway("OAUTH_ISSUER=" + iss.URL)

	for _, tc := range []struct{ name, path, prefix string }{
		{"aggregated", "/mcp", "demo-"},
		{"passthrough", "/mcp/demo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := iss.TokensIssued()
			out, output, err := runTSClient(t, gw.URL+tc.path, "", []tsCall{
				{Name: tc.prefix + "echo", Arguments: map[string]any{"text": "hello over OAuth"}},
			}, "MCP_OAUTH_CLIENT_ID=agent-7", "MCP_OAUTH_CLIENT_SECRET=s3cret-client-secret",
				"MCP_OAUTH_ISSUER="+iss.URL, "MCP_OAUTH_SCOPE=mcp:demo")
			if err != nil {
				t.Fatalf("client: %v\n%s", err, output)
			}
			if len(out.Calls) != 1 || out.Calls[0].Result == nil || len(out.Calls[0].Result.Content) == 0 ||
				out.Calls[0].Result.Content[0].Text != "hello over OAuth" {
				t.Fatalf("echo: %+v\n%s", out.Calls, output)
			}
			if n := iss.TokensIssued() - before; n != 1 {
				t.Errorf("%d tokens issued, want 1", n)
			}
			// The resource indicator the client sent is the one our
			// metadata names for the endpoint it used.
			if aud := iss.LastToken()["aud"]; aud != gw.URL+tc.path {
				t.Errorf("token audience %v, want %s", aud, gw.URL+tc.path)
			}
		})
	}
	gw.Stop() // every request record read
	logs := gw.Logs()
	if !strings.Contains(logs, `"principal":"oauth:`) || !strings.Contains(logs, `"sub":"agent-7"`) {
		t.Errorf("no OAuth principal in the gateway's log:\n%s", logs)
	}
	if strings.Contains(logs, "s3cret-client-secret") || strings.Contains(logs, "eyJ") {
		t.Error("a secret or a token appears in the gateway's log")
	}
}
