// A stdio MCP server (the reference TypeScript SDK) that sends its client questions as tasks (2025-11-25
// experimental tasks) and reports what it saw, for tests of the bot as the receiver of such questions.
//
// Run: node task_questions.mjs <folder holding node_modules/@modelcontextprotocol/sdk> (.cache/conformance) [SEEN]
// where SEEN, if given, is a file this process's id (`pid N`) and then each new status a poll sees are appended
// to (a line each), as they happen.
// Tools:
//   watch-question   asks one question as a task; polls tasks/get every 100 ms, noting each new status, until
//                    the task ends; then fetches tasks/result. Result: JSON {statuses, result}.
//   await-question   asks one question as a task and at once asks tasks/result, which waits for the answer.
//                    Result: JSON {result}.
//   cancel-question  asks one question as a task; polls until the bot shows it (input_required), then sends
//                    tasks/cancel, tasks/get and tasks/result, and tasks/get for an unknown task.
//                    Result: JSON {statuses, cancel, after, result, unknown}.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = join(process.argv[2], "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm");
const load = (path) => import(pathToFileURL(join(root, path)).href);
const { McpServer } = await load("server/mcp.js");
const { StdioServerTransport } = await load("server/stdio.js");
const { CreateTaskResultSchema, GetTaskResultSchema, CancelTaskResultSchema, ElicitResultSchema } =
  await load("types.js");

const QUESTION = {
  method: "elicitation/create",
  params: {
    task: { ttl: 60000 },
    message: "Which colour?",
    requestedSchema: {
      type: "object",
      properties: { colour: { type: "string", enum: ["Red", "Blue"] } },
      required: ["colour"],
    },
  },
};
const ENDED = new Set(["completed", "failed", "cancelled"]);
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const seen = process.argv[3];
if (seen) appendFileSync(seen, `pid ${process.pid}\n`);
const note = (statuses, status) => {
  if (status === statuses.at(-1)) return;
  statuses.push(status);
  if (seen) appendFileSync(seen, `${status}\n`);
};

async function attempt(send) {
  try {
    return await send();
  } catch (error) {
    return { error: String(error.message ?? error) };
  }
}

const server = new McpServer({ name: "task-questions", version: "1.0.0" });

server.registerTool("watch-question", { description: "ask a question as a task and watch it", inputSchema: {} }, async (_args, extra) => {
  const created = await extra.sendRequest(QUESTION, CreateTaskResultSchema);
  const taskId = created.task.taskId;
  const statuses = [];
  note(statuses, created.task.status);
  let status = created.task.status;
  for (let polls = 0; !ENDED.has(status) && polls < 3000; polls++) {
    await pause(100);
    status = (await extra.sendRequest({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema)).status;
    note(statuses, status);
  }
  const result = await attempt(() =>
    extra.sendRequest({ method: "tasks/result", params: { taskId } }, ElicitResultSchema.passthrough()),
  );
  return { content: [{ type: "text", text: JSON.stringify({ statuses, result }) }] };
});

server.registerTool("await-question", { description: "ask a question as a task, await its result", inputSchema: {} }, async (_args, extra) => {
  const created = await extra.sendRequest(QUESTION, CreateTaskResultSchema);
  const taskId = created.task.taskId;
  // No polling: tasks/result is asked at once and is answered when the task ends (the spec's blocking fetch).
  const result = await attempt(() =>
    extra.sendRequest({ method: "tasks/result", params: { taskId } }, ElicitResultSchema.passthrough(), {
      timeout: 600000,
    }),
  );
  return { content: [{ type: "text", text: JSON.stringify({ result }) }] };
});

server.registerTool("cancel-question", { description: "ask a question as a task, then cancel it", inputSchema: {} }, async (_args, extra) => {
  const created = await extra.sendRequest(QUESTION, CreateTaskResultSchema);
  const taskId = created.task.taskId;
  const statuses = [];
  note(statuses, created.task.status);
  let status = created.task.status;
  for (let polls = 0; status !== "input_required" && polls < 3000; polls++) {
    await pause(100);
    status = (await extra.sendRequest({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema)).status;
    note(statuses, status);
  }
  const cancel = await attempt(() =>
    extra.sendRequest({ method: "tasks/cancel", params: { taskId } }, CancelTaskResultSchema),
  );
  const after = await attempt(() => extra.sendRequest({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema));
  const result = await attempt(() =>
    extra.sendRequest({ method: "tasks/result", params: { taskId } }, ElicitResultSchema.passthrough()),
  );
  const unknown = await attempt(() =>
    extra.sendRequest({ method: "tasks/get", params: { taskId: "no-such-task" } }, GetTaskResultSchema),
  );
  const body = { statuses, cancel: cancel.status ?? cancel, after: after.status ?? after, result, unknown };
  return { content: [{ type: "text", text: JSON.stringify(body) }] };
});

await server.connect(new StdioServerTransport());
