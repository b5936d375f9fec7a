// mcp-client.mjs: a third-party MCP client (the official TypeScript SDK)
// for the gateway's tests and for trying a deployment by hand.
//
//   MCP_BEARER_KEY=<key> node infra/clients/mcp-client.mjs '<json>'
//
// <json> is {"url": "http://…/mcp", "calls": [{"name": "…", "arguments": {…}}]}.
// The script connects over streamable HTTP with the key as a bearer token,
// lists every tool (following cursors), makes each call in order, and prints
// one JSON object on stdout:
//
//   {"server": {…serverVersion}, "tools": ["name", …],
//    "calls": [{"name": "…", "result": {…CallToolResult}} | {"name": "…", "error": {"code": …, "message": "…"}}]}
//
// A protocol error of a call is reported in its entry; a failure to connect
// or list exits 1 with the error on stderr.
//
// With MCP_OAUTH_CLIENT_ID, MCP_OAUTH_CLIENT_SECRET and MCP_OAUTH_ISSUER
// instead of a key, the script is an OAuth 2.1 client (client credentials
// grant): on the gateway's 401 it reads the protected-resource metadata the
// WWW-Authenticate header points to, finds the authorization server there,
// asks it for a token for that resource with the scope MCP_OAUTH_SCOPE, and
// sends the token.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const { url, calls = [] } = JSON.parse(process.argv[2] ?? '{}');
if (!url) {
  console.error('usage: MCP_BEARER_KEY=<key> node mcp-client.mjs \'{"url": "…", "calls": [...]}\'');
  process.exit(2);
}
const headers = {};
if (process.env.MCP_BEARER_KEY) {
  headers.Authorization = `Bearer ${process.env.MCP_BEARER_KEY}`;
}

let authProvider;
if (process.env.MCP_OAUTH_CLIENT_ID) {
  authProvider = new ClientCredentialsProvider({
    clientId: process.env.MCP_OAUTH_CLIENT_ID,
    clientSecret: process.env.MCP_OAUTH_CLIENT_SECRET,
    expectedIssuer: process.env.MCP_OAUTH_ISSUER,
    scope: process.env.MCP_OAUTH_SCOPE,
  });
}

const client = new Client({ name: 'mcpgate-thirdparty-test', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, authProvider });
try {
  await client.connect(transport);
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);

  const results = [];
  for (const { name, arguments: args = {} } of calls) {
    try {
      results.push({ name, result: await client.callTool({ name, arguments: args }) });
    } catch (err) {
      results.push({ name, error: { code: err.code ?? null, message: String(err.message ?? err) } });
    }
  }
  console.log(JSON.stringify({ server: client.getServerVersion(), tools, calls: results }));
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exitCode = 1;
} finally {
  await client.close();
}
