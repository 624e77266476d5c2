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

  it("marks errors and carries the message", () => {
    const view = formatStatus({ state: "error", message: "no such model: /x" });
    assert.equal(view.isError, true);
    assert.match(view.tooltip, /no such model: \/x/);
  });
});
