// Activation only: create the pieces, register the commands, start the server.
import * as vscode from "vscode";

import { SpeclsServer } from "./server";
import { needsRestart, SECTION } from "./settings";
import { StatusBar } from "./statusBar";

const STATS_COMMAND = "specls.showStats";

let server: SpeclsServer | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("specls", { log: true });
  const statusBar = new StatusBar(STATS_COMMAND);
  server = new SpeclsServer(output, statusBar);
  const running = server;
  context.subscriptions.push(
    output,
    statusBar,
    running,
    vscode.commands.registerCommand("specls.restart", () => running.restart()),
    vscode.commands.registerCommand(STATS_COMMAND, async () => {
      const stats = await running.stats();
      output.info(`statistics:\n${JSON.stringify(stats, null, 2)}`);
      output.show(true);
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!event.affectsConfiguration(SECTION)) {
        return;
      }
      if (needsRestart((section) => event.affectsConfiguration(section))) {
        await running.restart();
      } else {
        await running.sendSettings();
      }
    }),
  );
  try {
    await running.start();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    void vscode.window.showErrorMessage(
      `specls could not start (${message}). Set "specls.serverCommand" to the specls executable.`,
    );
  }
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}
