// The status-bar item: model state, last latency and acceptance rate from the server's specls/status.
import * as vscode from "vscode";

export interface ServerStatus {
  state: "loading" | "ready" | "error";
  message?: string;
  model?: string | null;
  lastLatencyMs?: number | null;
  acceptanceRate?: number | null;
}

export interface StatusView {
  text: string;
  tooltip: string;
  isError: boolean;
}

const ICONS: Record<ServerStatus["state"], string> = {
  loading: "$(loading~spin)",
  ready: "$(sparkle)",
  error: "$(error)",
};

/** Pure formatting of one status notification, e.g. "$(sparkle) specls 38 ms · 62%". */
export function formatStatus(status: ServerStatus): StatusView {
  const parts = [`${ICONS[status.state] ?? ICONS.error} specls`];
  if (status.state === "ready") {
    if (typeof status.lastLatencyMs === "number") {
      parts.push(`${Math.round(status.lastLatencyMs)} ms`);
    }
    if (typeof status.acceptanceRate === "number") {
      parts.push(`· ${Math.round(status.acceptanceRate * 100)}%`);
    }
  }
  const lines = [`specls: ${status.state}`];
  if (status.model) {
    lines.push(`model: ${status.model}`);
  }
  if (status.message) {
    lines.push(status.message);
  }
  if (typeof status.acceptanceRate === "number") {
    lines.push(`accepted: ${(status.acceptanceRate * 100).toFixed(1)}% of shown suggestions`);
  }
  lines.push("Click for statistics.");
  return { text: parts.join(" "), tooltip: lines.join("\n"), isError: status.state === "error" };
}

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;

  constructor(clickCommand: string) {
    this.item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
    this.item.name = "specls";
    this.item.command = clickCommand;
    this.update({ state: "loading", message: "starting the server" });
    this.item.show();
  }

  update(status: ServerStatus): void {
    const view = formatStatus(status);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.isError ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}
