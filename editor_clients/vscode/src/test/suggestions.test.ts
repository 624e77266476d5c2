import { strict as assert } from "node:assert";
import { describe, it } from "node:test";

import { SuggestionTracker, suggestionIdOf } from "../suggestions";

function recorder(): { sent: string[]; tracker: SuggestionTracker } {
  const sent: string[] = [];
  const tracker = new SuggestionTracker((method, params) => sent.push(`${method} ${params.uri} ${params.suggestionId}`));
  return { sent, tracker };
}

describe("suggestion ids", () => {
  it("come from the specls.accept command argument", () => {
    assert.equal(suggestionIdOf({ command: { command: "specls.accept", arguments: ["s7"] } }), "s7");
    assert.equal(suggestionIdOf({ command: { command: "specls.accept", arguments: [12] } }), "12");
    assert.equal(suggestionIdOf({ command: { command: "other", arguments: ["s7"] } }), undefined);
    assert.equal(suggestionIdOf({}), undefined);
  });
});

describe("SuggestionTracker", () => {
  it("reports a shown suggestion once, and a replaced one as rejected", () => {
    const { sent, tracker } = recorder();
    tracker.shown("file:///a.py", "1");
    tracker.shown("file:///a.py", "1");
    tracker.shown("file:///a.py", "2");
    assert.deepEqual(sent, [
      "specls/didShow file:///a.py 1",
      "specls/didReject file:///a.py 1",
      "specls/didShow file:///a.py 2",
    ]);
  });

  it("knows which generation the suggestion on screen came from", () => {
    const { tracker } = recorder();
    tracker.shown("file:///a.py", "7+3");
    assert.equal(tracker.showsGeneration("file:///a.py", "7"), true);
    assert.equal(tracker.showsGeneration("file:///a.py", "3"), false);
    assert.equal(tracker.showsGeneration("file:///b.py", "7"), false);
    tracker.accepted("7+3");
    assert.equal(tracker.showsGeneration("file:///a.py", "7"), false);
  });

  it("does not reject an accepted suggestion", () => {
    const { sent, tracker } = recorder();
    tracker.shown("file:///a.py", "1");
    tracker.accepted("1");
    tracker.shown("file:///a.py", "2");
    assert.deepEqual(sent, ["specls/didShow file:///a.py 1", "specls/didShow file:///a.py 2"]);
  });

  it("rejects what was on screen when the answer is empty or the document closes", () => {
    const { sent, tracker } = recorder();
    tracker.shown("file:///a.py", "1");
    tracker.shown("file:///a.py", undefined);
    tracker.shown("file:///b.py", "2");
    tracker.closed("file:///b.py");
    tracker.closed("file:///b.py");
    assert.deepEqual(sent, [
      "specls/didShow file:///a.py 1",
      "specls/didReject file:///a.py 1",
      "specls/didShow file:///b.py 2",
      "specls/didReject file:///b.py 2",
    ]);
  });

  it("keeps documents apart and forgets everything on reset", () => {
    const { sent, tracker } = recorder();
    tracker.shown("file:///a.py", "1");
    tracker.shown("file:///b.py", "2");
    tracker.reset();
    tracker.shown("file:///a.py", "3");
    assert.deepEqual(sent, ["specls/didShow file:///a.py 1", "specls/didShow file:///b.py 2", "specls/didShow file:///a.py 3"]);
  });
});
