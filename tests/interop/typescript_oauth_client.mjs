// Drives the fixture server as an OAuth resource server with the official TypeScript SDK's
// OAuth client (`@modelcontextprotocol/sdk`, pinned in package-lock.json): client
// credentials from a real OpenID provider (tests/oauth), protocol 2025-11-25.
//
//     node typescript_oauth_client.mjs (machine|reader) ISSUER URL
//
// The client starts with no token, only the provider's client id and secret: the SDK must
// meet the fixture's 401, read the protected resource metadata it names, discover the
// authorization server at ISSUER, and get a token for the resource itself.
// - `machine` (scopes `echo:write tasks:read`) runs `slow_compute` as a task (tasks/get until
//   it settles, then tasks/result) and calls `scoped_echo`;
// - `reader` (scope `tasks:read` only) runs the same task, and its `scoped_echo` call must be
//   refused with 403 insufficient_scope.
// Exits 0 when the check holds; otherwise prints what was wrong and exits 1.

import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

class CheckFailed extends Error {}

function expect(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

const show = (value) => JSON.stringify(value);

function textOf(result) {
  const texts = (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text);
  expect(texts.length === 1, `expected one text block, got ${show(result)}`);
  return texts[0];
}

const SCOPES = { machine: 'echo:write tasks:read', reader: 'tasks:read' };

/// Every HTTP exchange the SDK makes, in order, with the `WWW-Authenticate` of the answer.
const exchanges = [];

async function recordingFetch(input, init) {
  const url = input instanceof Request ? input.url : String(input);
  const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
  const response = await fetch(input, init);
  const challenge = response.headers.get('www-authenticate') ?? undefined;
  exchanges.push({ method, url, status: response.status, challenge });
  return response;
}

/// Polls `tasks/get` until the task leaves `working`, for at most `seconds`.
async function settle(client, taskId, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const task = await client.experimental.tasks.getTask(taskId);
    if (task.status !== 'working') return task;
    expect(Date.now() < deadline, `task ${taskId} still working after ${seconds} s`);
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 200));
  }
}

async function run(clientId, issuer, url) {
  const authProvider = new ClientCredentialsProvider({
    clientId,
    clientSecret: 'secret',
    scope: SCOPES[clientId],
    expectedIssuer: issuer,
  });
  const client = new Client({ name: 'mcp-tasks-interop-oauth', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    authProvider,
    fetch: recordingFetch,
  });
  await client.connect(transport);
  try {
    // The way to the token, as the SDK found it.
    const mcp = new URL(url);
    const first = exchanges[0];
    expect(
      first?.url === mcp.href &&
        first.status === 401 &&
        /resource_metadata=/.test(first.challenge ?? ''),
      `the first request was not answered 401 naming the metadata: ${show(first)}`,
    );
    const metadata = exchanges.find((e) =>
      e.url.startsWith(`${mcp.origin}/.well-known/oauth-protected-resource`),
    );
    expect(metadata?.status === 200, `no protected resource metadata was read: ${show(exchanges)}`);
    const discovery = exchanges.find(
      (e) =>
        e.url.startsWith(`${issuer}/.well-known/`) &&
        /oauth-authorization-server|openid-configuration/.test(e.url) &&
        e.status === 200,
    );
    expect(
      discovery,
      `the authorization server at ${issuer} was not discovered: ${show(exchanges)}`,
    );
    const token = exchanges.find((e) => e.method === 'POST' && e.url.startsWith(issuer));
    expect(token?.status === 200, `no token from ${issuer}: ${show(exchanges)}`);
    const granted = authProvider.tokens();
    expect(granted?.access_token, `the provider holds no token: ${show(granted)}`);
    const sorted = (scope) => (scope ?? '').split(' ').sort().join(' ');
    expect(
      sorted(granted.scope) === sorted(SCOPES[clientId]),
      `the token's scope is ${show(granted.scope)}`,
    );

    // A task, end to end.
    const { tools } = await client.listTools();
    expect(
      tools.some((t) => t.name === 'slow_compute' && t.execution?.taskSupport === 'optional'),
      `slow_compute is not a task tool: ${show(tools.map((t) => t.name))}`,
    );
    const created = await client.request(
      {
        method: 'tools/call',
        params: {
          name: 'slow_compute',
          arguments: { seconds: 1, label: clientId },
          task: { ttl: 60000 },
        },
      },
      CreateTaskResultSchema,
    );
    const { taskId } = created.task;
    expect(created.task.status === 'working', `created: ${show(created)}`);
    const done = await settle(client, taskId);
    expect(done.status === 'completed', `settled as ${show(done)}`);
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    const text = textOf(result);
    expect(text === `${clientId} finished after 1 s`, `tasks/result: ${show(text)}`);

    // The scoped tool.
    let echoed;
    let refused;
    try {
      echoed = await client.callTool({ name: 'scoped_echo', arguments: { text: 'scoped' } });
    } catch (error) {
      refused = error;
    }
    if (clientId === 'machine') {
      expect(!refused, `scoped_echo failed: ${refused?.stack}`);
      expect(!echoed.isError && textOf(echoed) === 'scoped', `scoped_echo: ${show(echoed)}`);
    } else {
      expect(refused, `scoped_echo was answered without echo:write: ${show(echoed)}`);
      expect(
        refused.code === 403,
        `scoped_echo was refused otherwise than with 403: ${refused.stack}`,
      );
      const denied = exchanges.filter((e) => e.status === 403);
      expect(
        denied.length > 0 && denied.every((e) => /error="insufficient_scope"/.test(e.challenge)),
        `no 403 insufficient_scope on the wire: ${show(denied)}`,
      );
    }
    console.log(
      `${clientId}: ${exchanges.length} exchanges; task ${taskId} ${done.status}; scoped_echo ` +
        (refused ? `refused (${refused.message})` : `echoed ${show(textOf(echoed))}`),
    );
  } finally {
    await client.close();
  }
}

const [clientId, issuer, url] = process.argv.slice(2);
if (!SCOPES[clientId] || !issuer || !url) {
  console.error('usage: node typescript_oauth_client.mjs (machine|reader) ISSUER URL');
  process.exit(2);
}
const timer = setTimeout(() => {
  console.error(`typescript-sdk: ${clientId} did not finish within 120 s`);
  process.exit(1);
}, 120_000);
try {
  await run(clientId, issuer.replace(/\/$/, ''), url);
  clearTimeout(timer);
} catch (error) {
  console.error(`typescript-sdk: ${error instanceof CheckFailed ? error.message : error?.stack}`);
  process.exit(1);
}
