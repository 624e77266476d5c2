// The status-bar item: model state, last latency and acceptance rate from the server's specls/status.
import * as vscode from "vscode";

export interface ServerStatus {
  state: "loading" | "ready" | "error";
  message?: string;
  model?: string | null;
  lastLatencyMs?: number | null;
  acceptanceRate?: number | null;
  /** A completion is being generated. */
  generating?: boolean;
  /** Share of the prompt at the cursor already in the model's cache (warming while idle). */
  warmCached?: number | null;
  /** The last completion that failed, so it shows here and not only in a log. */
  lastError?: string | null;
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

/** Pure formatting of one status notification, e.g. "$(sparkle) specls 38 ms · 62%", "$(sync~spin) specls
 * generating", "$(flame) specls warming 40%". */
export function formatStatus(status: ServerStatus): StatusView {
  const warming = status.state === "ready" && typeof status.warmCached === "number" && status.warmCached < 1;
  let icon = ICONS[status.state] ?? ICONS.error;
  if (status.state === "ready" && status.generating) {
    icon = "$(sync~spin)";
  } else if (warming) {
    icon = "$(flame)";
  } else if (status.state === "ready" && status.lastError) {
    icon = "$(warning)";
  }
  const parts = [`${icon} specls`];
  if (status.state === "ready" && status.generating) {
    parts.push("generating");
  } else if (warming) {
    parts.push(`warming ${Math.round((status.warmCached ?? 0) * 100)}%`);
  }
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
  if (typeof status.warmCached === "number") {
    lines.push(`prompt at the cursor cached: ${Math.round(status.warmCached * 100)}%`);
  }
  if (status.lastError) {
    lines.push(`last error: ${status.lastError}`);
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
