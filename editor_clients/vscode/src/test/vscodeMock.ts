// A stand-in for the `vscode` module (which exists only inside the editor). It serves configuration the
// way VS Code does: the user's value if set, else the default declared in package.json.
import * as fs from "node:fs";
import * as path from "node:path";
import Module = require("node:module");

type Properties = Record<string, { default?: unknown }>;

const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8")) as {
  contributes: { configuration: { properties: Properties } };
};

/** The defaults package.json declares, keyed without the "specls." prefix. */
export const declaredDefaults: Record<string, unknown> = Object.fromEntries(
  Object.entries(manifest.contributes.configuration.properties).map(([key, spec]) => [
    key.replace(/^specls\./, ""),
    spec.default,
  ]),
);

/** What the user has set, keyed without the section prefix; tests assign to it. */
export const userSettings: Record<string, unknown> = {};
export const requestedSections: string[] = [];

const fakeVscode = {
  workspace: {
    getConfiguration(section: string) {
      requestedSections.push(section);
      return {
        get<T>(key: string): T | undefined {
          return (key in userSettings ? userSettings[key] : declaredDefaults[key]) as T | undefined;
        },
      };
    },
  },
};

// Resolve `require("vscode")` to the fake before any module under test loads it.
const moduleInternals = Module as unknown as {
  _resolveFilename: (request: string, ...rest: unknown[]) => string;
  _cache: Record<string, unknown>;
};
const originalResolve = moduleInternals._resolveFilename;
moduleInternals._resolveFilename = (request: string, ...rest: unknown[]) =>
  request === "vscode" ? "vscode" : originalResolve(request, ...rest);
require.cache.vscode = { id: "vscode", filename: "vscode", loaded: true, exports: fakeVscode } as NodeJS.Module;

export function clearUserSettings(): void {
  for (const key of Object.keys(userSettings)) {
    delete userSettings[key];
  }
}
