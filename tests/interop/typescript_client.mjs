// Drives the fixture server with the official TypeScript SDK (`@modelcontextprotocol/sdk`,
// pinned in package-lock.json), protocol 2025-11-25 with the experimental Tasks utility.
//
//     node typescript_client.mjs CHECK TARGET...
//
// CHECK is one of the keys of `checks` below; TARGET is an `http://` URL (Streamable HTTP) or
// the fixture's command line (stdio). Exits 0 when the check holds; otherwise prints what was
// wrong and exits 1.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

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

/// Connects a new client (a new session); `onElicit` answers elicitation requests.
async function connect(target, onElicit) {
  const client = new Client(
    { name: 'mcp-tasks-interop', version: '1.0.0' },
    { capabilities: { elicitation: {} } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    if (!onElicit) throw new CheckFailed(`unexpected question ${show(request.params)}`);
    return onElicit(request.params);
  });
  const transport = target[0].startsWith('http://')
    ? new StreamableHTTPClientTransport(new URL(target[0]))
    : new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: 'inherit' });
  await client.connect(transport);
  expect(
    client.transport?.protocolVersion === undefined ||
      client.transport.protocolVersion === '2025-11-25',
    `negotiated ${client.transport?.protocolVersion}`,
  );
  return client;
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

/// Runs `confirm_delete` as a streamed task call; returns the result and the questions asked.
async function confirmDelete(target, filename) {
  const asked = [];
  const client = await connect(target, async (params) => {
    asked.push(params.message);
    // A person takes a moment to answer.
    await new Promise((resolve) => setTimeout(resolve, 50));
    return { action: 'accept', content: { confirm: true } };
  });
  try {
    await client.listTools();
    const seen = [];
    let result;
    const stream = client.experimental.tasks.callToolStream({
      name: 'confirm_delete',
      arguments: { filename },
    });
    for await (const message of stream) {
      seen.push(message.type);
      if (message.type === 'error') throw new CheckFailed(`the call failed: ${message.error}`);
      if (message.type === 'result') result = message.result;
    }
    expect(seen[0] === 'taskCreated', `the call did not create a task: ${seen}`);
    expect(result !== undefined, `no result: ${seen}`);
    return { result, asked };
  } finally {
    await client.close();
  }
}

const checks = {
  async list(target) {
    const client = await connect(target);
    try {
      const { tools } = await client.listTools();
      const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
      expect(support.greet === 'forbidden', `greet: ${show(support.greet)}`);
      expect(support.slow_compute === 'optional', `slow_compute: ${show(support.slow_compute)}`);
      expect(
        support.confirm_delete === 'required',
        `confirm_delete: ${show(support.confirm_delete)}`,
      );
      const caps = client.getServerCapabilities();
      expect(caps?.tasks?.requests?.tools?.call, `no tasks capability: ${show(caps)}`);
    } finally {
      await client.close();
    }
  },

  async call(target) {
    const client = await connect(target);
    try {
      const result = await client.callTool({ name: 'greet', arguments: { name: 'typescript' } });
      expect(!result.isError, `greet failed: ${show(result)}`);
      const text = textOf(result);
      expect(text === 'Hello, typescript!', `greet answered ${show(text)}`);
    } finally {
      await client.close();
    }
  },

  // Create a task, poll it with tasks/get, read it with tasks/result, find it in tasks/list,
  // and the same through the SDK's streamed call.
  async tasks(target) {
    const client = await connect(target);
    try {
      await client.listTools();
      const created = await client.request(
        {
          method: 'tools/call',
          params: {
            name: 'slow_compute',
            arguments: { seconds: 1, label: 'ts' },
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
      expect(text === 'ts finished after 1 s', `tasks/result: ${show(text)}`);
      const listed = await client.experimental.tasks.listTasks();
      expect(
        listed.tasks.some((t) => t.taskId === taskId),
        `tasks/list lacks ${taskId}: ${show(listed)}`,
      );

      const seen = [];
      let streamed;
      for await (const message of client.experimental.tasks.callToolStream({
        name: 'slow_compute',
        arguments: { seconds: 1 },
      })) {
        seen.push(message.type);
        if (message.type === 'error') throw new CheckFailed(`stream: ${message.error}`);
        if (message.type === 'result') streamed = message.result;
      }
      expect(seen[0] === 'taskCreated', `the streamed call made no task: ${seen}`);
      expect(seen.includes('taskStatus'), `the streamed call was never polled: ${seen}`);
      expect(
        streamed && textOf(streamed) === 'compute finished after 1 s',
        `streamed result: ${show(streamed)}`,
      );
    } finally {
      await client.close();
    }
  },

  async cancel(target) {
    const client = await connect(target);
    try {
      const created = await client.request(
        {
          method: 'tools/call',
          params: { name: 'slow_compute', arguments: { seconds: 600 }, task: { ttl: 60000 } },
        },
        CreateTaskResultSchema,
      );
      const { taskId } = created.task;
      const cancelled = await client.experimental.tasks.cancelTask(taskId);
      expect(cancelled.status === 'cancelled', `tasks/cancel answered ${show(cancelled)}`);
      const task = await settle(client, taskId);
      expect(task.status === 'cancelled', `after cancel: ${show(task)}`);
      let refused;
      try {
        await client.experimental.tasks.cancelTask(taskId);
      } catch (error) {
        refused = error;
      }
      expect(refused?.code === -32602, `a second cancel was not refused: ${show(refused)}`);
    } finally {
      await client.close();
    }
  },

  // The question reaches the client's handler and its answer reaches the tool. (How often
  // it is asked is `elicitation-once`'s concern.)
  async elicitation(target) {
    const { result, asked } = await confirmDelete(target, 'notes.txt');
    expect(textOf(result) === 'deleted notes.txt', `result: ${show(result)}`);
    expect(
      asked.length > 0 && asked.every((q) => q === 'Delete notes.txt?'),
      `questions asked: ${show(asked)}`,
    );
  },

  // One question of `confirm_delete` must reach the person once, also when several sessions
  // run at once. INTEROP_RUNS and INTEROP_CONCURRENCY (default 30 and 6) say how many runs
  // there are and how many go at once.
  async 'elicitation-once'(target) {
    const runs = Number(process.env.INTEROP_RUNS ?? 30);
    const concurrency = Number(process.env.INTEROP_CONCURRENCY ?? 6);
    const twice = [];
    let next = 0;
    const worker = async () => {
      while (next < runs) {
        const run = next++;
        const filename = `file-${run}.txt`;
        const { result, asked } = await confirmDelete(target, filename);
        expect(textOf(result) === `deleted ${filename}`, `run ${run}: ${show(result)}`);
        if (asked.length !== 1) twice.push(`run ${run}: asked ${asked.length} times`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    expect(
      twice.length === 0,
      `${twice.length} of ${runs} runs asked their one question other than once ` +
        `(${twice.slice(0, 5).join('; ')}${twice.length > 5 ? '; …' : ''})`,
    );
  },
};

const [check, ...target] = process.argv.slice(2);
if (!checks[check] || target.length === 0) {
  console.error(`usage: node typescript_client.mjs (${Object.keys(checks).join('|')}) TARGET...`);
  process.exit(2);
}
const timer = setTimeout(() => {
  console.error(`typescript-sdk: ${check} did not finish within 120 s`);
  process.exit(1);
}, 120_000);
try {
  await checks[check](target);
  clearTimeout(timer);
} catch (error) {
  console.error(`typescript-sdk: ${error instanceof CheckFailed ? error.message : error?.stack}`);
  process.exit(1);
}
