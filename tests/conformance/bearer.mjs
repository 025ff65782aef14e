// The conformance suite as an agent of the bot's gateway: loaded with `node --import` before the suite.
//
// The suite's server scenarios connect to a URL with no credentials and call the reference tools by their
// own names (`test_simple_text`). The gateway wants `Authorization: Bearer <agent token>` and names a server's
// tools `<server>__<tool>`. This module adds the header to every request the suite makes (Node's fetch, which
// the suite's SDK client uses; undici's `request`, which its DNS-rebinding probe uses; node:http's `request`,
// which its header-validation probes use), and maps the names:
// `tools/call` (and its `Mcp-Name` header) gains the prefix on the way out, `tools/list` loses it on the way
// back. Nothing else is touched. Environment: TNX_TOKEN (the token), TNX_PREFIX (`<server>__`).
import http from "node:http";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

// undici as the suite has it: resolved from the suite's own folder (this file lives outside it).
const { Agent, setGlobalDispatcher } = createRequire(pathToFileURL(process.argv[1]))("undici");

const token = process.env.TNX_TOKEN;
const prefix = process.env.TNX_PREFIX ?? "";
if (!token) throw new Error("bearer.mjs: TNX_TOKEN is not set");
const bearer = `Bearer ${token}`;

/** undici's own requests (and fetch, where it goes through the same global dispatcher). */
class BearerAgent extends Agent {
  dispatch(options, handler) {
    const headers = options.headers;
    if (Array.isArray(headers)) {
      const names = headers.filter((_, i) => i % 2 === 0).map((h) => String(h).toLowerCase());
      if (!names.includes("authorization")) options.headers = [...headers, "authorization", bearer];
    } else if (headers && typeof headers[Symbol.iterator] === "function" && !(typeof headers === "string")) {
      const pairs = [...headers];
      if (!pairs.some(([k]) => String(k).toLowerCase() === "authorization")) pairs.push(["authorization", bearer]);
      options.headers = pairs.flat();
    } else {
      const plain = { ...(headers ?? {}) };
      if (!Object.keys(plain).some((k) => k.toLowerCase() === "authorization")) plain.authorization = bearer;
      options.headers = plain;
    }
    return super.dispatch(options, handler);
  }
}
setGlobalDispatcher(new BearerAgent());

function outgoing(message) {
  if (Array.isArray(message)) return message.map(outgoing);
  if (message?.method === "tools/call" && typeof message.params?.name === "string") {
    if (!message.params.name.startsWith(prefix)) message.params.name = prefix + message.params.name;
  }
  return message;
}

function incoming(message) {
  if (Array.isArray(message)) return message.map(incoming);
  const tools = message?.result?.tools;
  if (Array.isArray(tools)) {
    for (const tool of tools) {
      if (typeof tool?.name === "string" && tool.name.startsWith(prefix)) tool.name = tool.name.slice(prefix.length);
    }
  }
  return message;
}

function mapJson(text, map) {
  try {
    return JSON.stringify(map(JSON.parse(text)));
  } catch {
    return text;
  }
}

function mapSseLine(line) {
  const cr = line.endsWith("\r") ? "\r" : "";
  const bare = cr ? line.slice(0, -1) : line;
  if (!bare.startsWith("data:")) return line;
  const data = bare.slice(5).trimStart();
  return `data: ${mapJson(data, incoming)}${cr}`;
}

function sseMapper() {
  let buffer = "";
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  return new TransformStream({
    transform(chunk, controller) {
      buffer += decoder.decode(chunk, { stream: true });
      const lines = buffer.split("\n");
      buffer = lines.pop();
      if (lines.length) controller.enqueue(encoder.encode(lines.map(mapSseLine).join("\n") + "\n"));
    },
    flush(controller) {
      buffer += decoder.decode();
      if (buffer) controller.enqueue(encoder.encode(mapSseLine(buffer)));
    },
  });
}

const plainFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has("authorization")) headers.set("authorization", bearer);
  let body = init.body;
  if (typeof body === "string") {
    body = mapJson(body, outgoing);
    const name = headers.get("mcp-name");
    if (name && headers.get("mcp-method") === "tools/call" && !name.startsWith(prefix)) {
      headers.set("mcp-name", prefix + name);
    }
  }
  const response = await plainFetch(input, { ...init, headers, body });
  const type = response.headers.get("content-type") ?? "";
  if (!response.body || response.status === 202) return response;
  const kept = new Headers(response.headers);
  kept.delete("content-length");
  const meta = { status: response.status, statusText: response.statusText, headers: kept };
  if (type.includes("text/event-stream")) return new Response(response.body.pipeThrough(sseMapper()), meta);
  if (type.includes("application/json")) return new Response(mapJson(await response.text(), incoming), meta);
  return response;
};

const plainRequest = http.request;
http.request = (options, callback) => {
  const headers = { ...(options.headers ?? {}) };
  const names = Object.keys(headers).map((k) => k.toLowerCase());
  if (!names.includes("authorization")) headers.authorization = bearer;
  for (const key of Object.keys(headers)) {
    const lower = key.toLowerCase();
    // The body may change length below: sent chunked instead.
    if (lower === "content-length") delete headers[key];
    if (lower === "mcp-name" && typeof headers[key] === "string") {
      const method = Object.entries(headers).find(([k]) => k.toLowerCase() === "mcp-method")?.[1];
      const name = headers[key];
      const bare = name.trim();
      if (method === "tools/call" && bare && !bare.startsWith(prefix)) headers[key] = name.replace(bare, prefix + bare);
    }
  }
  const request = plainRequest({ ...options, headers }, callback);
  const write = request.write.bind(request);
  request.write = (chunk, ...rest) => write(typeof chunk === "string" ? mapJson(chunk, outgoing) : chunk, ...rest);
  return request;
};
