// An MCP client built on the official TypeScript SDK (@modelcontextprotocol/sdk): connects to the gateway
// over stdio or Streamable HTTP, answers the gateway's elicitation/create with the answer it is given, calls
// one tool, and prints one JSON object: what it was asked and the call's result or error.
//
// Usage: node ts_approval_client.mjs '<json>' with {transport: "stdio"|"http", command?, args?, env?, url?,
// token?, tool, arguments, answer: {action, content?}}. The test copies it next to the SDK's node_modules.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const spec = JSON.parse(process.argv[2]);
const asked = [];
const client = new Client(
  { name: "ts-approval-client", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  return spec.answer;
});

let transport;
if (spec.transport === "stdio") {
  transport = new StdioClientTransport({
    command: spec.command,
    args: spec.args,
    env: spec.env,
    stderr: "inherit",
  });
} else {
  const headers = spec.token ? { Authorization: `Bearer ${spec.token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers } });
}

const report = { asked };
try {
  await client.connect(transport);
  report.protocolVersion = transport.protocolVersion ?? null;
  report.result = await client.callTool({ name: spec.tool, arguments: spec.arguments });
} catch (error) {
  report.error = { code: error.code ?? null, message: String(error.message), data: error.data ?? null };
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
