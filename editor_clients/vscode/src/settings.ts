// Settings -> how to start the server and what to send it. Pure mapping: the only vscode call is
// reading the configuration section, so the unit tests run with a mocked vscode module.
import * as vscode from "vscode";

export const SECTION = "specls";

/** What settings.ts needs from a vscode.WorkspaceConfiguration (tests pass a plain object). */
export type ConfigReader = Pick<vscode.WorkspaceConfiguration, "get">;

/** Settings the server understands, camelCase as in its initializationOptions. */
export interface ServerSettings {
  backend: string;
  target: string | null;
  draft: string | null;
  device: string;
  dtype: string;
  runtime: string;
  quantize: string;
  endpoint: string | null;
  remoteModel: string | null;
  apiKeyEnv: string;
  maxNewTokens: number;
  temperature: number;
  drafter: string;
  debounceMs: number;
  firstLineFirst: boolean;
  partialAfterMs: number;
  firstLineMs: number;
  warm: boolean;
  warmIdleMs: number;
  prefetch: boolean;
  maxLines: number;
  suppressInComments: boolean;
  suppressInStrings: boolean;
  tokenHealing: boolean;
  contextTokens: number | null;
  suffixTokens: number | null;
  promptShape: string;
  minFirstLineProbability: number | null;
  importedFiles: boolean;
  importDefinitions: boolean;
  steerImports: boolean;
  linesBelowTokens: number | null;
}

type ServerKey = keyof ServerSettings;

/** Server keys whose value is a path or name where "" means "not set" (the bundled model, no endpoint). */
const OPTIONAL_STRING_KEYS: readonly ServerKey[] = ["target", "draft", "endpoint", "remoteModel"];

/** Every server key; the order is the order they are sent in (tests/unit/test_settings_agree.py checks it
 * against the server's declaration, lsp_server/config.py). */
export const SERVER_KEYS: readonly ServerKey[] = [
  "backend",
  "target",
  "draft",
  "device",
  "dtype",
  "runtime",
  "quantize",
  "endpoint",
  "remoteModel",
  "apiKeyEnv",
  "maxNewTokens",
  "temperature",
  "drafter",
  "debounceMs",
  "firstLineFirst",
  "partialAfterMs",
  "firstLineMs",
  "warm",
  "warmIdleMs",
  "prefetch",
  "maxLines",
  "suppressInComments",
  "suppressInStrings",
  "tokenHealing",
  "contextTokens",
  "suffixTokens",
  "promptShape",
  "minFirstLineProbability",
  "importedFiles",
  "importDefinitions",
  "steerImports",
  "linesBelowTokens",
];

/** Changing one of these means the model (or the process) must be started again. */
export const RESTART_KEYS: readonly string[] = [
  "serverCommand",
  "serverArgs",
  "tcp",
  "tcpTokenFile",
  "backend",
  "target",
  "draft",
  "device",
  "dtype",
  "runtime",
  "quantize",
  "endpoint",
  "remoteModel",
  "apiKeyEnv",
];

export interface ServerLaunch {
  command: string;
  args: string[];
}

export function currentConfig(): ConfigReader {
  return vscode.workspace.getConfiguration(SECTION);
}

function normalize(key: ServerKey, value: unknown): unknown {
  if (typeof value === "string") {
    const trimmed = value.trim();
    if (OPTIONAL_STRING_KEYS.includes(key) && trimmed === "") {
      return null;
    }
    return trimmed;
  }
  return value ?? null;
}

/**
 * The server's settings as initializationOptions (also the body of didChangeConfiguration under "specls").
 * Values are passed through as the user typed them: the server validates each one, falls back to its
 * default and says so with window/showMessage, so the rules live in one place.
 */
export function toInitializationOptions(config: ConfigReader): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = config.get<unknown>(key);
    if (value !== undefined) {
      options[key] = normalize(key, value);
    }
  }
  return options;
}

/** `<serverCommand> serve <serverArgs...>`; a blank command falls back to `specls` on PATH. */
export function serverLaunch(config: ConfigReader): ServerLaunch {
  const command = (config.get<string>("serverCommand") ?? "").trim() || "specls";
  const extra = config.get<unknown>("serverArgs");
  const args = Array.isArray(extra) ? extra.filter((arg): arg is string => typeof arg === "string") : [];
  return { command, args: ["serve", ...args] };
}

/** Whether a configuration change needs a server restart rather than a didChangeConfiguration. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`${SECTION}.${key}`));
}
