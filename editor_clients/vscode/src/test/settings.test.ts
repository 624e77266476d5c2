import { strict as assert } from "node:assert";
import { beforeEach, describe, it } from "node:test";

import { clearUserSettings, requestedSections, userSettings } from "./vscodeMock";
// Imported after the mock is installed.
import { currentConfig, needsRestart, SERVER_KEYS, serverLaunch, toInitializationOptions } from "../settings";

describe("settings -> initializationOptions", () => {
  beforeEach(clearUserSettings);

  it("reads the specls section", () => {
    currentConfig();
    assert.equal(requestedSections.at(-1), "specls");
  });

  it("sends the server's own defaults when nothing is set", () => {
    assert.deepEqual(toInitializationOptions(currentConfig()), {
      backend: "local",
      target: null,
      draft: null,
      device: "auto",
      dtype: "auto",
      runtime: "auto",
      quantize: "auto",
      endpoint: null,
      remoteModel: null,
      apiKeyEnv: "SPECLS_API_KEY",
      maxNewTokens: 64,
      temperature: 0,
      drafter: "hybrid",
      debounceMs: 0,
      firstLineFirst: false,
      partialAfterMs: 80,
      firstLineMs: 100,
      warm: true,
      warmIdleMs: 300,
      prefetch: true,
      maxLines: 8,
      suppressInComments: false,
      suppressInStrings: true,
      tokenHealing: true,
      contextTokens: null,
      suffixTokens: null,
      promptShape: "auto",
      minFirstLineProbability: null,
      importedFiles: false,
      importDefinitions: true,
      steerImports: true,
      linesBelowTokens: null,
    });
  });

  it("passes the model and device the user chose, trimmed", () => {
    Object.assign(userSettings, { target: "  /models/target ", draft: "/models/draft", device: "cuda:1" });
    const options = toInitializationOptions(currentConfig());
    assert.equal(options.target, "/models/target");
    assert.equal(options.draft, "/models/draft");
    assert.equal(options.device, "cuda:1");
  });

  it("maps a blank model path to null, which means the bundled model", () => {
    Object.assign(userSettings, { target: "", draft: "   ", endpoint: "" });
    const options = toInitializationOptions(currentConfig());
    assert.equal(options.target, null);
    assert.equal(options.draft, null);
    assert.equal(options.endpoint, null);
  });

  it("leaves invalid values for the server to reject and report", () => {
    Object.assign(userSettings, { maxNewTokens: -3, backend: "nonsense" });
    const options = toInitializationOptions(currentConfig());
    assert.equal(options.maxNewTokens, -3);
    assert.equal(options.backend, "nonsense");
  });

  it("keeps client-only settings out of what the server receives", () => {
    Object.assign(userSettings, { serverCommand: "/opt/specls/bin/specls", serverArgs: ["--log-file", "x"] });
    const options = toInitializationOptions(currentConfig());
    assert.deepEqual(Object.keys(options), [...SERVER_KEYS]);
    assert.ok(!("serverCommand" in options) && !("trace.server" in options));
  });
});

describe("server launch", () => {
  beforeEach(clearUserSettings);

  it("runs `specls serve` from PATH by default", () => {
    assert.deepEqual(serverLaunch(currentConfig()), { command: "specls", args: ["serve"] });
  });

  it("uses the configured path and extra arguments", () => {
    Object.assign(userSettings, {
      serverCommand: " /home/me/.venv/bin/specls ",
      serverArgs: ["--log-file", "/tmp/specls.log", 3],
    });
    assert.deepEqual(serverLaunch(currentConfig()), {
      command: "/home/me/.venv/bin/specls",
      args: ["serve", "--log-file", "/tmp/specls.log"],
    });
  });

  it("falls back to `specls` for a blank command", () => {
    userSettings.serverCommand = "  ";
    assert.equal(serverLaunch(currentConfig()).command, "specls");
  });
});

describe("restart decision", () => {
  it("restarts for the model, the device and the process; not for live settings", () => {
    const changed = (key: string) => (section: string) => section === `specls.${key}`;
    for (const key of ["target", "draft", "device", "dtype", "backend", "serverCommand", "serverArgs"]) {
      assert.equal(needsRestart(changed(key)), true, key);
    }
    for (const key of ["maxNewTokens", "temperature", "debounceMs", "maxLines", "contextTokens", "suffixTokens", "linesBelowTokens"]) {
      assert.equal(needsRestart(changed(key)), false, key);
    }
  });
});
