import { strict as assert } from "node:assert";
import { describe, it } from "node:test";

import "./vscodeMock";
import { formatStatus } from "../statusBar";

describe("status bar text", () => {
  it("shows latency and acceptance rate when ready", () => {
    const view = formatStatus({ state: "ready", model: "bundled", lastLatencyMs: 37.6, acceptanceRate: 0.625 });
    assert.equal(view.text, "$(sparkle) specls 38 ms · 63%");
    assert.match(view.tooltip, /model: bundled/);
    assert.equal(view.isError, false);
  });

  it("shows only the state before the first completion", () => {
    assert.equal(formatStatus({ state: "ready", lastLatencyMs: null, acceptanceRate: null }).text, "$(sparkle) specls");
    assert.equal(formatStatus({ state: "loading", message: "loading model" }).text, "$(loading~spin) specls");
  });

  it("shows generating, warming with the share cached, and a failed completion", () => {
    assert.equal(formatStatus({ state: "ready", generating: true, lastLatencyMs: 12 }).text, "$(sync~spin) specls generating 12 ms");
    const warming = formatStatus({ state: "ready", warmCached: 0.4 });
    assert.equal(warming.text, "$(flame) specls warming 40%");
    assert.match(warming.tooltip, /cached: 40%/);
    assert.equal(formatStatus({ state: "ready", warmCached: 1, lastLatencyMs: 30 }).text, "$(sparkle) specls 30 ms");
    const failed = formatStatus({ state: "ready", lastError: "completion failed: boom" });
    assert.equal(failed.text, "$(warning) specls");
    assert.match(failed.tooltip, /last error: completion failed: boom/);
  });

  it("marks errors and carries the message", () => {
    const view = formatStatus({ state: "error", message: "no such model: /x" });
    assert.equal(view.isError, true);
    assert.match(view.tooltip, /no such model: \/x/);
  });
});
