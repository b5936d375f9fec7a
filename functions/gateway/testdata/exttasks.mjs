// exttasks.mjs drives the @modelcontextprotocol/ext-tasks client (its
// requester session, over a port that speaks MCP 2026-07-28 streamable
// HTTP with fetch) against a gateway: it creates tasks, polls them to
// their outcome, answers an input request, and cancels one. It prints one
// JSON object of what it saw.
//
// node exttasks.mjs <ext-tasks package dir> <MCP endpoint URL> <bearer key>
import { pathToFileURL } from "node:url";

const [, , pkgDir, url, key] = process.argv;
const { withTasks } = await import(pathToFileURL(`${pkgDir}/dist/client/index.js`).href);

const version = "2026-07-28";
const tasksExtension = "io.modelcontextprotocol/tasks";
const seen = { methods: {}, handles: [] };
let nextId = 1;

// port is the session port the library drives: every request is framed
// as a 2026-07-28 request (version and capabilities in _meta, the SEP-2243
// headers) and answered as it came.
const port = {
  endpointId: "gateway",
  taskCapabilities: { generation: "v2", capabilities: {} },
  invalidated: false,
  async dispatch(request, options) {
    const req = { jsonrpc: "2.0", id: nextId++, ...structuredClone(request) };
    req.params = { ...(req.params ?? {}) };
    req.params._meta = {
      ...(req.params._meta ?? {}),
      "io.modelcontextprotocol/protocolVersion": version,
      "io.modelcontextprotocol/clientCapabilities": { extensions: { [tasksExtension]: {} }, elicitation: { form: {} } },
    };
    seen.methods[req.method] = (seen.methods[req.method] ?? 0) + 1;
    // The host's own headers first; the transport's (SEP-2243: the
    // method, and the tool or task named) are set from this request.
    const headers = new Headers(options?.context?.headers ?? {});
    headers.set("content-type", "application/json");
    headers.set("accept", "application/json, text/event-stream");
    headers.set("mcp-protocol-version", version);
    headers.set("mcp-method", req.method);
    headers.set("authorization", `Bearer ${key}`);
    headers.delete("mcp-name");
    const name = req.params.taskId ?? req.params.name;
    if (typeof name === "string") headers.set("mcp-name", name);
    const res = await fetch(url, { method: "POST", headers, body: JSON.stringify(req), signal: options?.signal });
    let text = await res.text();
    if (text.startsWith("event:")) {
      for (const line of text.split("\n")) {
        if (line.startsWith("data: ") && line.includes('"id"')) text = line.slice(6);
      }
    }
    const msg = JSON.parse(text);
    if (msg.error) return { kind: "error", error: msg.error };
    if (msg.result?.taskId) seen.handles.push(msg.result.taskId);
    return { kind: "result", result: msg.result };
  },
  onServerRequest() { return () => {}; },
  onNotification() { return () => {}; },
  onInvalidated() { return () => {}; },
};

const session = withTasks(port, {
  onInputRequest: async (request) =>
    request.kind === "elicitation" ? { action: "accept", content: { confirm: true } } : { action: "decline" },
});
const text = (outcome) =>
  outcome.status === "completed"
    ? outcome.result.content?.[0]?.text
    : `${outcome.status}: ${outcome.error?.message ?? ""} ${outcome.error?.cause ? JSON.stringify(outcome.error.cause) : ""} ${JSON.stringify(outcome.error ?? {})}`;
const out = {};
try {
  const quick = await session.callTool("slow_compute", { seconds: 0.3, label: "quick" });
  out.quickKind = quick.kind;
  out.quick = (await quick.settle()).outcome;
  out.quickText = text(out.quick);

  const confirm = await session.callTool("confirm_delete", { filename: "notes.txt" });
  out.confirmKind = confirm.kind;
  out.confirmText = text((await confirm.settle()).outcome);

  const long = await session.callTool("slow_compute", { seconds: 60 });
  out.longKind = long.kind;
  out.longId = long.handle?.taskId;
  await long.cancel();
  const after = await port.dispatch({ method: "tasks/get", params: { taskId: out.longId } });
  out.longStatus = after.result?.status ?? JSON.stringify(after.error);
} catch (err) {
  out.error = String(err?.stack ?? err);
} finally {
  await session.close();
}
out.methods = seen.methods;
out.handles = seen.handles;
console.log(JSON.stringify(out));
