// A real handshake-era client, the official TypeScript SDK (`@modelcontextprotocol/sdk` 1.x,
// installed by `scripts/install-test-clients.sh ts`) over StreamableHTTPClientTransport,
// driven line by line by a Rust test (the virtual server behind `switchboard serve`).
//
// Usage: node ts_vmcp.mjs URL NODE_MODULES
//
// The SDK is loaded from NODE_MODULES (the cached install under .tools/, outside this
// script's directory tree, so a bare `import` could not resolve it). Speaks the same line
// protocol as py_vmcp_legacy.py: prints {"ready", "protocolVersion", "server"}, then answers
// each stdin command (`list`, `call`, `quit`) with one JSON line.
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [url, nodeModules] = process.argv.slice(2);
const sdk = (sub) =>
  import(pathToFileURL(join(nodeModules, "@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

// As in the Python scripts: a call nobody answers becomes an error the test can see.
const CALL_TIMEOUT_MS = 10_000;
const MAX_PAGES = 50;

const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

async function listAll(client) {
  const names = [];
  let cursor;
  for (let page = 1; page <= MAX_PAGES; page++) {
    const result = await client.listTools(cursor === undefined ? {} : { cursor });
    names.push(...result.tools.map((t) => t.name));
    cursor = result.nextCursor;
    if (cursor === undefined) return { tools: names, pages: page };
  }
  return { error: `tools/list did not end within ${MAX_PAGES} pages` };
}

async function call(client, name, args) {
  const started = Date.now();
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, {
      timeout: CALL_TIMEOUT_MS,
    });
    const text = result.content.find((c) => c.type === "text");
    return { text: text ? text.text : null, isError: !!result.isError, ms: Date.now() - started };
  } catch (e) {
    return { error: String(e.message ?? e), code: e.code ?? null, ms: Date.now() - started };
  }
}

const client = new Client({ name: "switchboard-ts-test", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
say({
  ready: true,
  protocolVersion: transport.protocolVersion ?? null,
  server: client.getServerVersion()?.name ?? null,
});

// One command at a time, in order: the test waits for each answer before the next line.
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
for (;;) {
  const { value, done } = await lines.next();
  if (done || !value.trim()) break;
  const cmd = JSON.parse(value);
  if (cmd.op === "list") {
    // A refused page (a cursor outdated mid-walk) is an answer too, not a crash.
    say(await listAll(client).catch((e) => ({ error: String(e.message ?? e), code: e.code ?? null })));
  }
  else if (cmd.op === "call") say(await call(client, cmd.name, cmd.arguments ?? {}));
  else break;
}
await client.close();
process.exit(0);
