"""Stop rules applied while the completion is generated (an engine.api.StopCheck), plus the final trim.

Each rule looks at the completion text so far and may name an index where it must end; the earliest wins:
1. single-line mode ends at the first newline;
2. at most `max_lines` lines;
3. the end of the cursor's block: a line indented below the block (brace languages may still close the
   block with a line that starts with a bracket the completion has not opened);
4. brackets balanced against the suffix: a closing bracket the suffix already supplies is not generated;
5. no duplication: the rest of the cursor's line, or the next non-empty line of the file, is not repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lsp_server.context.syntax import CLOSERS, MATCHING, OPENERS, Mode, indent_width, indentation

_QUOTES = "\"'`"


def _bracket_events(text: str, line_comment: str) -> list[tuple[int, str]]:
    """(index, bracket) for every bracket outside string literals and line comments (a light lexer)."""
    events = []
    quote = ""
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote or (ch == "\n" and quote != "`"):
                quote = ""
        elif ch in _QUOTES:
            quote = ch
        elif line_comment and text.startswith(line_comment, i):
            newline = text.find("\n", i)
            i = n if newline == -1 else newline
            continue
        elif ch in OPENERS or ch in CLOSERS:
            events.append((i, ch))
        i += 1
    return events


def unmatched_closers(text: str, line_comment: str = "") -> list[str]:
    """Closing brackets in `text` that close something opened before it, in order: ")}" -> [")", "}"]."""
    stack: list[str] = []
    result = []
    for _, ch in _bracket_events(text, line_comment):
        if ch in OPENERS:
            stack.append(ch)
        elif stack and stack[-1] == MATCHING[ch]:
            stack.pop()
        elif not stack:
            result.append(ch)
    return result


def _only_punctuation(text: str) -> bool:
    return all(ch in CLOSERS or ch in OPENERS or ch in " \t;,:." for ch in text)


@dataclass
class SyntaxStopRules:
    """An engine.api.StopCheck: call it with the completion so far; it returns a cut index or None."""

    mode: Mode
    line_before: str  # text on the cursor's line before the cursor
    suffix: str  # text after the cursor
    block_indent: int  # a completed line indented less than this ends the block
    indent_blocks: bool  # Python-like: blocks close by dedent only (no closing-bracket line)
    max_lines: int = 8
    line_comment: str = ""
    tab_size: int = 4
    suffix_closers: list[str] = field(init=False)
    rest_of_line: str = field(init=False)
    next_line: str = field(init=False)

    def __post_init__(self) -> None:
        self.suffix_closers = unmatched_closers(self.suffix[:4000], self.line_comment)
        first_newline = self.suffix.find("\n")
        self.rest_of_line = (self.suffix if first_newline == -1 else self.suffix[:first_newline]).strip()
        self.next_line = ""
        if first_newline != -1:
            for line in self.suffix[first_newline + 1 : first_newline + 2000].split("\n"):
                if line.strip():
                    self.next_line = line.strip()
                    break

    def __call__(self, text: str) -> int | None:
        return self.cut(text, final=False)

    def cut(self, text: str, *, final: bool) -> int | None:
        """Where `text` must end, or None. `final`: generation is over, so the last line is complete."""
        cuts = [
            self._single_line(text),
            self._max_lines(text),
            self._block_end(text),
            self._bracket_from_suffix(text),
            self._duplicates(text, final),
        ]
        found = [c for c in cuts if c is not None]
        return min(found) if found else None

    # 1
    def _single_line(self, text: str) -> int | None:
        if self.mode != "single-line":
            return None
        newline = text.find("\n")
        return None if newline == -1 else newline

    # 2
    def _max_lines(self, text: str) -> int | None:
        pos = -1
        for _ in range(self.max_lines):
            pos = text.find("\n", pos + 1)
            if pos == -1:
                return None
        return pos

    # 3
    def _block_end(self, text: str) -> int | None:
        if self.mode != "multi-line":
            return None
        start = text.find("\n")
        while start != -1:
            end = text.find("\n", start + 1)
            line = text[start + 1 : len(text) if end == -1 else end]
            dedented = line.strip() and indent_width(line, self.tab_size) < self.block_indent
            if dedented and not self._closes_open_block(text, start + 1 + len(indentation(line))):
                return start
            start = end
        return None

    def _closes_open_block(self, text: str, index: int) -> bool:
        """A dedented line is allowed in brace languages when it starts with a bracket that closes
        something opened before the completion (e.g. the `}` of the block being completed)."""
        if self.indent_blocks or index >= len(text) or text[index] not in CLOSERS:
            return False
        return bool(unmatched_closers(text[: index + 1], self.line_comment))

    # 4
    def _bracket_from_suffix(self, text: str) -> int | None:
        if not self.suffix_closers:
            return None
        stack: list[str] = []
        for index, ch in _bracket_events(text, self.line_comment):
            if ch in OPENERS:
                stack.append(ch)
            elif stack:
                stack.pop()
            else:
                # The first bracket closing something opened before the cursor: the suffix has it already?
                return index if ch == self.suffix_closers[0] else None
        return None

    # 5
    def _duplicates(self, text: str, final: bool) -> int | None:
        first_newline = text.find("\n")
        first_line = text if first_newline == -1 else text[:first_newline]
        # Closing brackets after the cursor are the bracket rule's business (they may be matched inside).
        if self.rest_of_line and not any(ch in CLOSERS for ch in self.rest_of_line):
            found = first_line.find(self.rest_of_line)
            if found != -1:
                return found
        if not self.next_line or _only_punctuation(self.next_line):
            return None
        lines = text.split("\n")
        start = 0
        for i, line in enumerate(lines):
            complete = i < len(lines) - 1 or final
            whole = (self.line_before + line) if i == 0 else line
            if complete and whole.strip() == self.next_line and (i > 0 or not self.line_before.strip()):
                return max(start - 1, 0)
            start += len(line) + 1
        return None


def finalize(text: str, rules: SyntaxStopRules | None) -> str:
    """Apply the rules to the finished text (its last line is now complete) and trim trailing whitespace.

    When a multi-line completion stops before a closing bracket that follows the cursor on its line, the
    completion keeps a final newline and the line's indentation, so that bracket lands on its own line."""
    if rules is not None:
        cut = rules.cut(text, final=True)
        if cut is not None:
            text = text[:cut]
    lines = [line.rstrip() for line in text.split("\n")]
    trimmed = "\n".join(lines).rstrip()
    if not trimmed.strip():
        return ""
    if (
        rules is not None
        and rules.mode == "multi-line"
        and "\n" in trimmed
        and rules.rest_of_line[:1] in tuple(CLOSERS)
    ):
        trimmed += "\n" + indentation(rules.line_before)
    return trimmed
