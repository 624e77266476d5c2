// Which suggestion is on screen per document, so that accept and reject reach the server's statistics.
// VS Code's stable API says when an item is accepted (it runs the item's command) but not when one is
// dismissed, so a suggestion counts as rejected when the next answer for that document replaces it.

export const ACCEPT_COMMAND = "specls.accept";

export type Notify = (method: string, params: { uri: string; suggestionId: string }) => void;

/** The server's id for an inline item: the argument of its `specls.accept` command. */
export function suggestionIdOf(item: { command?: { command: string; arguments?: unknown[] } }): string | undefined {
  const command = item.command;
  if (command?.command !== ACCEPT_COMMAND) {
    return undefined;
  }
  const id = command.arguments?.[0];
  return typeof id === "string" || typeof id === "number" ? String(id) : undefined;
}

export class SuggestionTracker {
  /** uri -> id of the suggestion shown there and not yet accepted or replaced. */
  private readonly onScreen = new Map<string, string>();

  constructor(private readonly notify: Notify) {}

  /** A new answer for `uri` (undefined when there is none): the previous one, if different, was rejected. */
  shown(uri: string, suggestionId: string | undefined): void {
    const previous = this.onScreen.get(uri);
    if (previous === suggestionId) {
      return; // the same suggestion again (e.g. the user typed what it predicted)
    }
    if (previous !== undefined) {
      this.onScreen.delete(uri);
      this.notify("specls/didReject", { uri, suggestionId: previous });
    }
    if (suggestionId !== undefined) {
      this.onScreen.set(uri, suggestionId);
      this.notify("specls/didShow", { uri, suggestionId });
    }
  }

  /** Whether the suggestion on screen in `uri` came from the server's generation `generationId` (an id is
   * "<generation>" or "<generation>+<characters typed since>"). */
  showsGeneration(uri: string, generationId: string): boolean {
    const id = this.onScreen.get(uri);
    return id !== undefined && id.split("+")[0] === generationId;
  }

  /** The user accepted `suggestionId`; the server already counts it through its `specls.accept` command. */
  accepted(suggestionId: string): void {
    for (const [uri, id] of this.onScreen) {
      if (id === suggestionId) {
        this.onScreen.delete(uri);
      }
    }
  }

  /** The document closed: whatever was on screen there was not taken. */
  closed(uri: string): void {
    this.shown(uri, undefined);
  }

  /** Forget everything without reporting (the server restarted and knows none of these ids). */
  reset(): void {
    this.onScreen.clear();
  }
}
