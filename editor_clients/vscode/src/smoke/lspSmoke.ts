// A third-party LSP client over stdio (vscode-jsonrpc, the transport VS Code's client uses): starts the
// server, opens a document, asks for an inline completion, accepts it and prints a JSON summary.
// Usage: node out/smoke/lspSmoke.js [--text T] [--init-options JSON] [--timeout-ms N] -- specls serve ...
import { spawn } from "node:child_process";
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";

interface Options {
  text: string;
  initOptions: Record<string, unknown>;
  timeoutMs: number;
  server: string[];
}

interface InlineItem {
  insertText: string | { value: string };
  range?: unknown;
  command?: { command: string; arguments?: unknown[] };
}

function parseArgs(argv: string[]): Options {
  const split = argv.indexOf("--");
  if (split < 0 || split === argv.length - 1) {
    throw new Error("usage: lspSmoke.js [--text T] [--init-options JSON] [--timeout-ms N] -- <server command...>");
  }
  const options: Options = { text: "def add(a, b):\n    ", initOptions: {}, timeoutMs: 120_000, server: argv.slice(split + 1) };
  const flags = argv.slice(0, split);
  for (let i = 0; i < flags.length; i += 2) {
    const value = flags[i + 1];
    if (value === undefined) {
      throw new Error(`missing value for ${flags[i]}`);
    }
    if (flags[i] === "--text") {
      options.text = value;
    } else if (flags[i] === "--init-options") {
      options.initOptions = JSON.parse(value) as Record<string, unknown>;
    } else if (flags[i] === "--timeout-ms") {
      options.timeoutMs = Number(value);
    } else {
      throw new Error(`unknown flag ${flags[i]}`);
    }
  }
  return options;
}

/** The end of `text` as an LSP position (JS string indices are UTF-16 code units, LSP's default). */
function endPosition(text: string): { line: number; character: number } {
  const lines = text.split("\n");
  return { line: lines.length - 1, character: lines[lines.length - 1].length };
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms).unref()),
  ]);
}

async function session(connection: MessageConnection, options: Options): Promise<Record<string, unknown>> {
  const statuses: { state?: string }[] = [];
  const messages: unknown[] = [];
  let settled: (() => void) | undefined;
  const loaded = new Promise<void>((resolve) => (settled = resolve));
  connection.onNotification("specls/status", (params: { state?: string }) => {
    statuses.push(params);
    if (params.state === "ready" || params.state === "error") {
      settled?.(); // the model finished loading (a request before that is answered empty)
    }
  });
  connection.onNotification("window/showMessage", (params) => void messages.push(params));
  connection.onNotification("window/logMessage", () => undefined);
  connection.onRequest("workspace/configuration", () => []);
  connection.onRequest("window/workDoneProgress/create", () => null);
  connection.onRequest("client/registerCapability", () => null);

  const init = await connection.sendRequest<{ capabilities: Record<string, unknown> }>("initialize", {
    processId: process.pid,
    clientInfo: { name: "specls-smoke", version: "0.1.0" },
    rootUri: null,
    capabilities: {
      general: { positionEncodings: ["utf-16"] },
      textDocument: {
        synchronization: { dynamicRegistration: false },
        inlineCompletion: { dynamicRegistration: false },
      },
      workspace: { configuration: true, executeCommand: { dynamicRegistration: false } },
      window: { showMessage: {} },
    },
    initializationOptions: options.initOptions,
  });
  await connection.sendNotification("initialized", {});
  await loaded;

  const uri = "file:///smoke/example.py";
  await connection.sendNotification("textDocument/didOpen", {
    textDocument: { uri, languageId: "python", version: 1, text: options.text },
  });
  const started = performance.now();
  const answer = await connection.sendRequest<InlineItem[] | { items: InlineItem[] } | null>(
    "textDocument/inlineCompletion",
    {
      textDocument: { uri },
      position: endPosition(options.text),
      context: { triggerKind: 2 }, // Automatic: as the editor asks while the user types
    },
  );
  const latencyMs = performance.now() - started;
  const items = Array.isArray(answer) ? answer : (answer?.items ?? []);
  const first = items[0];
  let accepted: unknown = null;
  if (first?.command) {
    const suggestionId = first.command.arguments?.[0];
    await connection.sendNotification("specls/didShow", { uri, suggestionId });
    accepted = await connection.sendRequest("workspace/executeCommand", {
      command: first.command.command,
      arguments: first.command.arguments ?? [],
    });
  }
  const stats = await connection.sendRequest("specls/stats", {});
  await connection.sendRequest("shutdown");
  await connection.sendNotification("exit");
  return {
    capabilities: {
      inlineCompletionProvider: init.capabilities.inlineCompletionProvider ?? null,
      executeCommandProvider: init.capabilities.executeCommandProvider ?? null,
    },
    items,
    latencyMs,
    acceptResult: accepted ?? null,
    stats,
    statuses,
    messages,
  };
}

async function main(): Promise<number> {
  const options = parseArgs(process.argv.slice(2));
  const [command, ...args] = options.server;
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  child.on("error", (error) => {
    process.stderr.write(`could not start ${command}: ${error.message}\n`);
    process.exit(2);
  });
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  connection.listen();
  try {
    const diedEarly = exited.then((code): never => {
      throw new Error(`the server exited with code ${code} before the session ended`);
    });
    const summary = await withTimeout(
      Promise.race([session(connection, options), diedEarly]),
      options.timeoutMs,
      "LSP session",
    );
    summary.serverExitCode = await withTimeout(exited, 10_000, "server exit after `exit`");
    diedEarly.catch(() => undefined); // it settled after a clean exit; nothing to report
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    const items = summary.items as unknown[];
    return items.length > 0 ? 0 : 1;
  } finally {
    connection.dispose();
    if (child.exitCode === null) {
      child.kill();
    }
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`lspSmoke failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
