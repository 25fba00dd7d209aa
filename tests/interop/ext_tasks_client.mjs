// Drives the fixture server with the TypeScript SDK 2.x (`@modelcontextprotocol/client`) and
// its Tasks extension (`@modelcontextprotocol/ext-tasks`), as the MCP Inspector 2.x uses them:
// protocol 2025-11-25 with the Tasks utility, both pinned in package-lock.json.
//
//     node ext_tasks_client.mjs CHECK TARGET...
//
// CHECK is one of the keys of `checks` below; TARGET is an `http://` URL (Streamable HTTP) or
// the fixture's command line (stdio). Exits 0 when the check holds; otherwise prints what was
// wrong and exits 1.
//
// ext-tasks matches a question to a task by its related-task `_meta` against the tasks it
// knows, which it learns from the response that creates each one; a question it cannot match
// is answered `{"action": "cancel"}`. So every question must come after that response.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

class CheckFailed extends Error {}

function expect(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

const show = (value) => JSON.stringify(value);

function textOf(result) {
  const texts = (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text);
  expect(texts.length === 1, `expected one text block, got ${show(result)}`);
  return texts[0];
}

/// Runs `confirm_delete` through a task session; returns its text and what was asked, and
/// the questions the session could not match to a task.
async function confirmDelete(target, filename) {
  const client = new Client(
    { name: 'mcp-tasks-interop-ext-tasks', version: '1.0.0' },
    { capabilities: { elicitation: {} } },
  );
  const transport = target[0].startsWith('http://')
    ? new StreamableHTTPClientTransport(new URL(target[0]))
    : new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: 'inherit' });
  await client.connect(transport);
  const asked = [];
  const unmatched = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: 'fixture',
    onInputRequest: async (request, context) => {
      asked.push({ message: request.params?.message, scope: context.scope, task: context.taskId });
      // A person takes a moment to answer.
      await new Promise((resolve) => setTimeout(resolve, 20));
      return { action: 'accept', content: { confirm: true } };
    },
    onError: (error) => unmatched.push(String(error?.message ?? error)),
  });
  try {
    await client.listTools();
    const execution = await session.callTool('confirm_delete', { filename });
    const { outcome } = await execution.settle();
    return { text: textOf(resultFromTaskOutcome(outcome)), asked, unmatched };
  } finally {
    await session.close();
    await client.close();
  }
}

const checks = {
  // INTEROP_RUNS and INTEROP_CONCURRENCY (default 40 and 8) say how many sessions run the
  // question-asking tool and how many go at once. Each must be asked once, in its task, and
  // take the "yes" branch.
  async 'elicitation-order'(target) {
    const runs = Number(process.env.INTEROP_RUNS ?? 40);
    const concurrency = Number(process.env.INTEROP_CONCURRENCY ?? 8);
    const wrong = [];
    let next = 0;
    const worker = async () => {
      while (next < runs) {
        const run = next++;
        const filename = `file-${run}.txt`;
        const { text, asked, unmatched } = await confirmDelete(target, filename);
        if (text !== `deleted ${filename}`) wrong.push(`run ${run}: ${show(text)}`);
        else if (asked.length !== 1 || asked[0].scope !== 'task' || !asked[0].task)
          wrong.push(`run ${run}: asked ${show(asked)}`);
        if (unmatched.length > 0) wrong.push(`run ${run}: ${unmatched.join('; ')}`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    expect(
      wrong.length === 0,
      `${wrong.length} of ${runs} runs went wrong ` +
        `(${wrong.slice(0, 5).join('; ')}${wrong.length > 5 ? '; …' : ''})`,
    );
  },
};

const [check, ...target] = process.argv.slice(2);
if (!checks[check] || target.length === 0) {
  console.error(`usage: node ext_tasks_client.mjs (${Object.keys(checks).join('|')}) TARGET...`);
  process.exit(2);
}
const timer = setTimeout(() => {
  console.error(`ext-tasks: ${check} did not finish within 150 s`);
  process.exit(1);
}, 150_000);
try {
  await checks[check](target);
  clearTimeout(timer);
} catch (error) {
  console.error(`ext-tasks: ${error instanceof CheckFailed ? error.message : error?.stack}`);
  process.exit(1);
}
