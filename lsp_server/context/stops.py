"""Stop rules applied while the completion is generated (an engine.api.StopCheck), plus the final trim.

Each rule looks at the completion text so far and may name an index where it must end; the earliest wins:
0. no marker text: a FIM, chat or end-of-text marker ends the completion where it starts;
1. single-line mode ends at the first newline;
2. at most `max_lines` lines;
2b. among the imports, no later line naming what the workspace lacks: a `from` line after the first that
   imports a module or a name the workspace does not have (`engine.imports.import_line_fits`) ends the
   suggestion before it (the first line is steered instead, `engine.imports.ImportLineConstraint`);
3. the end of the cursor's block: a line indented below the block (brace languages may still close the
   block with a line that starts with a bracket the completion has not opened);
4. brackets balanced against the suffix: a closing bracket the suffix already supplies is not generated;
5. no duplication: the rest of the cursor's line, or the next non-empty line of the file, is not repeated;
6. no degeneration: the completion ends before it repeats itself (`first_repetition`);
7-9. what is shown (`gate`): no chat artifacts (fences, prose), no suggestion that only repeats the next line or
   the text after the cursor, and a first line the model was confident of (when the backend says how sure);
10. no comment after code: a comment that follows code on its line ends the suggestion after the code. What it
   says is the author's to write: at the line starts of bench/results the models never wrote one that was right,
   tool directives (`# noqa: F841`, `# pragma: no cover`) included.

The engine checks the text after every token in the plain and the speculative loop alike, so each rule ends
both at the same token and greedy speculative output stays identical to plain output.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.api import ImportNames
from engine.imports import import_line_fits
from engine.words import NAME, is_word_char
from lsp_server.context.gate import chat_artifact, first_line_confidence, repeats_neighbour
from lsp_server.context.syntax import (
    CLOSERS,
    MATCHING,
    OPENERS,
    LiteralKind,
    Mode,
    indent_width,
    indentation,
)

_QUOTES = "\"'`"
_TRIPLE_QUOTES = ('"""', "'''")


def _bracket_events(text: str, line_comment: str) -> tuple[tuple[int, str], ...]:
    """(index, bracket) for every bracket outside string literals and line comments."""
    return _lex(text, line_comment)[0]


def comment_starts(text: str, line_comment: str) -> tuple[int, ...]:
    """Where each line comment outside string literals starts."""
    return _lex(text, line_comment)[1] if line_comment else ()


# Rules 4 and 10 read the same text at each token: it is lexed once.
@functools.lru_cache(maxsize=4)
def _lex(text: str, line_comment: str) -> tuple[tuple[tuple[int, str], ...], tuple[int, ...]]:
    """(index, bracket) for every bracket outside string literals and line comments, and where each line
    comment starts (a light lexer).

    Triple-quoted strings span lines: a docstring's prose ("the model's (first) line") holds apostrophes
    and brackets that are not code."""
    events = []
    comments = []
    quote = ""
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if not quote and text.startswith(_TRIPLE_QUOTES, i):
            end = text.find(text[i : i + 3], i + 3)
            i = n if end == -1 else end + 3
            continue
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote or (ch == "\n" and quote != "`"):
                quote = ""
        elif ch in _QUOTES:
            quote = ch
        elif line_comment and text.startswith(line_comment, i):
            comments.append(i)
            newline = text.find("\n", i)
            i = n if newline == -1 else newline
            continue
        elif ch in OPENERS or ch in CLOSERS:
            events.append((i, ch))
        i += 1
    return tuple(events), tuple(comments)


def unmatched_closers(text: str, line_comment: str = "") -> list[str]:
    """Closing brackets in `text` that close something opened before it, in order: ")}" -> [")", "}"]."""
    return [ch for _, ch in unmatched_closer_events(text, line_comment)]


def unmatched_closer_events(text: str, line_comment: str = "") -> list[tuple[int, str]]:
    """(index, bracket) for each closing bracket in `text` that closes something opened before it."""
    stack: list[str] = []
    result = []
    for index, ch in _bracket_events(text, line_comment):
        if ch in OPENERS:
            stack.append(ch)
        elif stack and stack[-1] == MATCHING[ch]:
            stack.pop()
        elif not stack:
            result.append((index, ch))
    return result


def innermost_open_indent(text: str, line_comment: str = "", tab_size: int = 4) -> int | None:
    """The indentation of the line holding the innermost bracket `text` leaves open, or None."""
    openers: list[int] = []
    for index, ch in _bracket_events(text, line_comment):
        if ch in OPENERS:
            openers.append(index)
        elif openers:
            openers.pop()
    if not openers:
        return None
    return indent_width(text[text.rfind("\n", 0, openers[-1]) + 1 :], tab_size)


def leading_indent(text: str, index: int, tab_size: int = 4) -> int | None:
    """The indentation width of the line of `text` holding `index`, where only indentation comes before it on
    that line; else None."""
    before = text[text.rfind("\n", 0, index) + 1 : index]
    return None if before.strip() else indent_width(before, tab_size)


# Degeneration guard (rule 6). A small model that loses its way loops: the same line again and again, or a
# few words within a line ("self.length - self.length - self.length - "). Code repeats too, but differently:
# lists of constants ("0, 0, 0", "None, None"), separators ("# -----"), indexed runs ("a[0], a[1], a[2]")
# and bracket-only lines ("}" under "}"). So the rule asks for an exact repeat of a unit that has a name in
# it (not a literal constant), and is cut at the first repeat:
# - a unit within one line (2 to 40 characters, not letters alone) seen three times in a row;
# - a block of one to three lines (with their indentation) seen twice in a row.
MAX_REPEATED_UNIT = 40
MAX_REPEATED_LINES = 3
_REPEATED_UNIT = re.compile(rf"(?=([^\n]{{2,{MAX_REPEATED_UNIT}}}?)\1\1)")
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")  # "\x00" is data, not a name
_HEX_DIGITS = "_0123456789abcdefABCDEF"
_LITERALS = frozenset(
    ("None", "True", "False", "null", "nil", "true", "false", "undefined", "NULL", "nullptr")
)


def _has_name(text: str, min_length: int = 1) -> bool:
    """Does `text` hold a name (of at least `min_length` characters) that is not a literal constant?"""
    names = NAME.findall(_ESCAPE.sub(" ", text))
    return any(
        len(name) >= min_length and name not in _LITERALS and name.strip(_HEX_DIGITS) for name in names
    )  # hex digits alone ("ffff", "_0") are data


@functools.lru_cache(maxsize=1024)
def _repeat_in_line(line: str) -> int | None:
    """Index of the first repeat of a unit seen three times in a row in `line` (see the rule above)."""
    line = _ESCAPE.sub(lambda escape: "\0" * len(escape.group()), line)  # same length: indices stay
    for match in _REPEATED_UNIT.finditer(line):
        unit = match.group(1)
        if unit.isalpha() or not any(ch.isalpha() for ch in unit):  # "abab", "0, 0, ": data, not a loop
            continue
        # Names are read on the repeated run widened to whole words: the unit may start mid-word ("e, Non").
        start, end = match.start(), match.start() + 3 * len(unit)
        while 0 < start < end and is_word_char(line[start]) and is_word_char(line[start - 1]):
            start -= 1
        while end < len(line) and is_word_char(line[end - 1]) and is_word_char(line[end]):
            end += 1
        if end == len(line):  # a word at the end of the text may still grow ("Non" of "None"): leave it out
            while end > start and is_word_char(line[end - 1]):
                end -= 1
        if _has_name(line[start:end], min_length=2):  # "%s %s %s" and "a, a, a" are not loops
            return match.start() + len(unit)
    return None


def first_repetition(text: str, line_before: str = "", final: bool = False) -> int | None:
    """Where `text` starts to repeat itself, or None (rule 6). The first line counts with `line_before`
    (the code before the cursor on its line) when lines are compared; only complete lines are compared
    (all of them when `final`)."""
    lines = text.split("\n")
    complete = len(lines) if final else len(lines) - 1
    whole = [line_before + lines[0], *lines[1:]]
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    for index, line in enumerate(lines):
        for period in range(1, min(MAX_REPEATED_LINES, index) + 1):
            if index + period > complete:
                continue
            block = whole[index - period : index]
            if block == whole[index : index + period] and _has_name("\n".join(block), min_length=2):
                return starts[index] - 1  # the line break that ends the first copy
        found = _repeat_in_line(line)
        if found is not None:
            return starts[index] + found
    return None


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
    markers: tuple[str, ...] = ()  # text that never belongs to a suggestion (`fim.marker_texts`)
    literal: LiteralKind | None = None  # the comment or docstring the cursor is in (prose is allowed there)
    min_first_line_probability: float = 0.0  # rule 9's threshold; 0: off
    # Rule 2b: what the workspace's modules hold, at a line among a Python file's imports (else None).
    later_imports: ImportNames | None = None
    suffix_closers: list[str] = field(init=False)
    prefix: str = ""  # the text before the cursor, its last few thousand characters from a line's start
    # The indentation of the suffix's first closer where it starts a line below the cursor's (else None), and
    # of the line that opened the innermost bracket still open at the cursor (else None).
    suffix_closer_indent: int | None = field(init=False)
    open_indent: int | None = field(init=False)
    rest_of_line: str = field(init=False)
    next_line: str = field(init=False)
    # Names of the rules that cut this completion, for the server's statistics ("repetition" is rule 6).
    fired: set[str] = field(init=False, default_factory=set)
    # What the engine last said of its tokens (`engine.api.ConfidenceReader`); empty: not known.
    token_probs: Sequence[float] = field(init=False, default=())
    token_ends: Sequence[int] = field(init=False, default=())

    def __post_init__(self) -> None:
        first_newline = self.suffix.find("\n")
        line_rest = self.suffix if first_newline == -1 else self.suffix[:first_newline]
        # Inside a comment or docstring the suffix starts in prose, which a lexer cannot pair with the code
        # after it: only the rest of the line counts there.
        scanned = self.suffix[:4000] if self.literal is None else line_rest
        closers = unmatched_closer_events(scanned, self.line_comment)
        self.suffix_closers = [ch for _, ch in closers]
        first = closers[0][0] if closers else -1
        below = first_newline != -1 and first > first_newline
        self.suffix_closer_indent = leading_indent(scanned, first, self.tab_size) if below else None
        self.open_indent = None
        # Rule 4 reads the innermost open bracket only where the suffix's closer starts a line: no prefix scan
        # per request elsewhere.
        if self.suffix_closer_indent is not None:
            self.open_indent = innermost_open_indent(self.prefix, self.line_comment, self.tab_size)
        self.rest_of_line = line_rest.strip()
        self.next_line = ""
        if first_newline != -1:
            for line in self.suffix[first_newline + 1 : first_newline + 2000].split("\n"):
                if line.strip():
                    self.next_line = line.strip()
                    break

    def __call__(self, text: str) -> int | None:
        return self.cut(text, final=False)

    def read_token_probs(self, token_probs: Sequence[float], token_ends: Sequence[int]) -> None:
        self.token_probs, self.token_ends = token_probs, token_ends

    def cut(self, text: str, *, final: bool) -> int | None:
        """Where `text` must end, or None. `final`: generation is over, so the last line is complete."""
        cuts = [
            (self._marker(text), "marker"),
            (self._single_line(text), "single-line"),
            (self._max_lines(text), "max-lines"),
            (self._invented_import(text, final), "import"),
            (self._block_end(text), "block-end"),
            (self._bracket_from_suffix(text), "brackets"),
            (self._duplicates(text, final), "duplicate"),
            (first_repetition(text, self.line_before, final), "repetition"),
            (chat_artifact(text, self.literal, final), "chat"),
            (self._comment_after_code(text), "comment"),
        ]
        found = [(index, name) for index, name in cuts if index is not None]
        # 8, 9: judged on what the other rules leave; each drops the whole suggestion.
        kept = text[: min(found)[0]] if found else text
        if self._repeats(kept, final):
            found.append((0, "repeat"))
        if self._unsure(kept):
            found.append((0, "confidence"))
        if not found:
            return None
        index, name = min(found)
        self.fired.add(name)
        return index

    # 0
    def _marker(self, text: str) -> int | None:
        found = [index for marker in self.markers if (index := text.find(marker)) != -1]
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

    # 2b
    def _invented_import(self, text: str, final: bool) -> int | None:
        """The line break before the first later line that is, or can only become, a `from` import of what
        the workspace lacks. An unfinished line is judged by what it can still become."""
        if self.later_imports is None:
            return None
        start = text.find("\n")
        while start != -1:
            end = text.find("\n", start + 1)
            line = text[start + 1 : end if end != -1 else len(text)].rstrip("\r")
            if not import_line_fits(line, self.later_imports, ended=end != -1 or final):
                return start
            start = end
        return None

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
                # Not where the suffix's closer starts a line indented less than the line that opened the
                # bracket: formatted code closes it at that line's indentation, so the suffix's is an outer one's.
                if ch != self.suffix_closers[0]:
                    return None
                closer, opener = self.suffix_closer_indent, self.open_indent
                outer = closer is not None and opener is not None and closer < opener
                return None if outer else index
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

    # 10
    def _comment_after_code(self, text: str) -> int | None:
        """The end of the code before the first comment that follows code on its line (the cursor's line counts
        what is before the cursor)."""
        if self.literal is not None or not self.line_comment:
            return None
        for start in comment_starts(text, self.line_comment):
            line_start = text.rfind("\n", 0, start) + 1
            code = text[line_start:start] if line_start else self.line_before + text[:start]
            # Not a comment line of its own, nor a marker right after a word (a shell's `${#items}`).
            if code.strip() and code[-1].isspace():
                return line_start + len(text[line_start:start].rstrip())
        return None

    # 8
    def _repeats(self, text: str, final: bool) -> bool:
        newline = text.find("\n")
        if newline == -1 and not final:
            return False  # the first line may still grow
        first = text if newline == -1 else text[:newline]
        if _only_punctuation(first.strip()):
            return False  # a line of brackets under one like it is rule 4's to judge, by their indentation
        return repeats_neighbour(first, self.line_before, self.rest_of_line, self.next_line)

    # 9
    def _unsure(self, text: str) -> bool:
        if self.min_first_line_probability <= 0 or not self.token_probs:
            return False
        confidence = first_line_confidence(text, self.token_probs, self.token_ends)
        return confidence is not None and confidence < self.min_first_line_probability


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
