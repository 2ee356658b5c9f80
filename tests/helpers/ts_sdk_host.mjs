// An MCP host on the TypeScript SDK (Claude Desktop's, VS Code's, every Node host's): starts the
// server command of argv[2] (a JSON array), makes the calls read from stdin (a JSON array of {name,
// arguments}) in turn, then a ping; one JSON line each on stdout. The SDK's folder is argv[3].
const sdk = process.argv[3];
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);

let calls = "";
for await (const chunk of process.stdin) calls += chunk;
const [command, ...args] = JSON.parse(process.argv[2]);
const client = new Client({ name: "ts-sdk-host", version: "1" }, { capabilities: {} });
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));
const say = (what) => console.log(JSON.stringify(what));
const failed = (e) => ({ error: String(e).slice(0, 500) });

for (const call of JSON.parse(calls)) {
  try {
    const result = await client.callTool(call, undefined, { timeout: 20000 });
    const text = result.content.map((c) => c.text ?? "").join("");
    say({ isError: result.isError ?? false, text: text.slice(0, 1000), length: text.length });
  } catch (e) {
    say(failed(e));
  }
}
try {
  await client.ping();
  say({ ping: "ok" });
} catch (e) {
  say(failed(e));
}
await client.close();
