// The language client: starts `specls serve`, forwards settings, and wires status and suggestion events.
import * as vscode from "vscode";
import {
  LanguageClient,
  type LanguageClientOptions,
  type Middleware,
  type ServerOptions,
  type StaticFeature,
} from "vscode-languageclient/node";

import { currentConfig, SECTION, serverLaunch, toInitializationOptions } from "./settings";
import { connect, readToken, tcpTarget } from "./tcp";
import type { ServerStatus, StatusBar } from "./statusBar";
import { ACCEPT_COMMAND, SuggestionTracker, suggestionIdOf } from "./suggestions";

const CURSOR_NOTIFICATION = "specls/cursor";
const CURSOR_REST_MS = 200;
const GROWN_NOTIFICATION = "specls/suggestionGrown";

/** Tells the server that the extension asks again when a suggestion it got in part is whole, so the server
 * may answer mid-line with what it has so far. */
const asksAgainWhenGrown: StaticFeature = {
  fillClientCapabilities: (capabilities) => {
    const experimental = (capabilities.experimental ?? {}) as Record<string, unknown>;
    capabilities.experimental = { ...experimental, speclsSuggestionGrown: true };
  },
  initialize: () => undefined,
  getState: () => ({ kind: "static" }),
  clear: () => undefined,
};

export class SpeclsServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly tracker = new SuggestionTracker((method, params) => {
    void this.client?.sendNotification(method, params);
  });
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(
    private readonly output: vscode.LogOutputChannel,
    private readonly statusBar: StatusBar,
  ) {
    this.subscriptions.push(
      vscode.workspace.onDidCloseTextDocument((document) => this.tracker.closed(document.uri.toString())),
      // Where the user is, so the server can warm its cache for the next request there (not on typing:
      // every key press already asks for a completion at the cursor).
      vscode.window.onDidChangeTextEditorSelection((event) => {
        if (event.kind !== undefined && event.kind !== vscode.TextEditorSelectionChangeKind.Command) {
          this.cursorSoon(event.textEditor);
        }
      }),
      vscode.window.onDidChangeActiveTextEditor((editor) => editor && this.cursorSoon(editor)),
      vscode.window.onDidChangeTextEditorVisibleRanges((event) => this.cursorSoon(event.textEditor)),
    );
  }

  private cursorTimer: ReturnType<typeof setTimeout> | undefined;

  /** `specls/cursor` once the cursor has rested for a moment (a burst of moves sends one). */
  private cursorSoon(editor: vscode.TextEditor): void {
    clearTimeout(this.cursorTimer);
    this.cursorTimer = setTimeout(() => {
      const client = this.client;
      if (!client?.isRunning() || editor.document.isClosed) {
        return;
      }
      const position = editor.selection.active;
      void client.sendNotification(CURSOR_NOTIFICATION, {
        textDocument: { uri: client.code2ProtocolConverter.asUri(editor.document.uri) },
        position: { line: position.line, character: position.character },
      });
    }, CURSOR_REST_MS);
  }

  async start(): Promise<void> {
    const config = currentConfig();
    const launch = serverLaunch(config);
    let serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
    };
    const initializationOptions = toInitializationOptions(config);
    let what = `${launch.command} ${launch.args.join(" ")}`;
    try {
      const target = tcpTarget(config.get<string>("tcp") ?? "", config.get<string>("tcpTokenFile") ?? "");
      if (target) {
        initializationOptions.token = readToken(target.tokenFile); // the first message must carry it
        serverOptions = () => connect(target);
        what = `tcp ${target.host}:${target.port}`;
      }
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.statusBar.update({ state: "error", message });
      throw error;
    }
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
      initializationOptions,
      outputChannel: this.output,
      middleware: this.middleware(),
    };
    this.output.info(`starting: ${what}`);
    this.statusBar.update({ state: "loading", message: `starting ${what}` });
    const client = new LanguageClient("specls", "specls", serverOptions, clientOptions);
    client.onNotification("specls/status", (status: ServerStatus) => this.statusBar.update(status));
    client.registerFeature(asksAgainWhenGrown);
    client.onNotification(GROWN_NOTIFICATION, (params: { uri: string; suggestionId: string }) =>
      this.grown(client, params),
    );
    this.client = client;
    this.tracker.reset();
    try {
      await client.start();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.statusBar.update({ state: "error", message: `could not start ${what}: ${message}` });
      throw error;
    }
  }

  /** The suggestion on screen was answered in part and is whole now: ask again while it is still there. */
  private grown(client: LanguageClient, params: { uri: string; suggestionId: string }): void {
    const uri = client.protocol2CodeConverter.asUri(params.uri).toString();
    const editor = vscode.window.activeTextEditor;
    if (editor?.document.uri.toString() === uri && this.tracker.showsGeneration(uri, String(params.suggestionId))) {
      void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client?.isRunning()) {
      await client.stop();
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Live settings (not the model or the process) go to the running server. */
  async sendSettings(): Promise<void> {
    await this.client?.sendNotification("workspace/didChangeConfiguration", {
      settings: { [SECTION]: toInitializationOptions(currentConfig()) },
    });
  }

  /** The server's local statistics (never sent anywhere else). */
  async stats(): Promise<unknown> {
    if (!this.client?.isRunning()) {
      throw new Error("the specls server is not running");
    }
    return this.client.sendRequest("specls/stats", {});
  }

  private middleware(): Middleware {
    return {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const result = await next(document, position, context, token);
        const items = Array.isArray(result) ? result : (result?.items ?? []);
        const first = items[0] as { command?: vscode.Command } | undefined;
        if (!token.isCancellationRequested) {
          this.tracker.shown(document.uri.toString(), first ? suggestionIdOf(first) : undefined);
        }
        return result;
      },
      // VS Code runs an accepted item's command; the client forwards it to the server, which counts it.
      executeCommand: (command, args: unknown[], next): vscode.ProviderResult<unknown> => {
        if (command === ACCEPT_COMMAND && args.length > 0) {
          this.tracker.accepted(String(args[0]));
        }
        return next(command, args) as vscode.ProviderResult<unknown>;
      },
    };
  }

  dispose(): void {
    clearTimeout(this.cursorTimer);
    for (const subscription of this.subscriptions) {
      subscription.dispose();
    }
    void this.stop();
  }
}
