"""What is shown: pure rules that end or drop a suggestion unlikely to be right (the stop rules apply them,
`stops.SyntaxStopRules` rules 7-9, while the text is generated and again on the finished text).

7. No chat artifacts (`chat_artifact`): Instruct models close a code block (a ``` fence), announce code
   ("Here is the updated code:") or explain it afterwards ("This function returns ...", "**Explanation:**",
   "1. The loop ..."). The completion ends where such a line (or a fence inside a line) starts. A line inside
   a string literal or a comment (one the cursor is in, or one the completion opens) is prose by right and
   is kept: a docstring may say anything, and a fence there is Markdown.
8. No repeats (`repeats_neighbour`): a suggestion whose first line, read with the code before the cursor, is
   the next non-empty line of the file, or is just the text after the cursor, is dropped (llama.vim drops
   these too); `stops` rule 5 cuts later duplicated lines.
9. Confident first line (`first_line_confidence`): the probability the target gave the first non-blank line
   as written, the product of its tokens' probabilities. Below the threshold
   (`ContextSettings.min_first_line_probability`, fit on held-out line starts by `bench lines`) the whole
   suggestion is dropped. The line's probability, not its least likely token's: it is the model's own
   estimate that the whole line is right, and at the same exact lines shown it showed fewer wrong ones
   (docs/line-starts.md). It only falls as tokens come, so the gate still decides while the line streams: a
   line shown part-way is above the threshold so far. Backends that report no probabilities are never gated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from lsp_server.context.syntax import LiteralKind

FENCE = "```"
# Openers of a chat answer's prose, at the start of a line of code.
_CHAT_OPENER = re.compile(
    r"""^(?:
        Here(?:'s|\s+is|\s+are)\b
      | (?:Sure|Certainly|Of\s+course|Explanation|Hope\s+this|Please\s+note)\b
      | (?:In|With)\s+this\s+(?:code|example|implementation|function|version|snippet)\b
      | This\s+(?:code|function|class|method|script|implementation|solution|approach|snippet|version|will|is|should|way)\b
      | The\s+(?:code|function|above|following|output|method|class|implementation|script)\s+[a-z]
      | I\s+(?:have|hope|'ve|added|updated|changed|made)\b
      | (?:Let\s+me|Let's|You\s+can|You\s+may|Make\s+sure)\b
      | (?:Notes?|Output|Explanation|Usage|Example|Tip|Warning)(?=\s*:\s+\S+\s+\S)
    )
    # ... not a name used as code: `Sure()`, `Explanation = 1`, `Note: str = ""`, `Here.x`
    (?!\s*[=(.\[+\-*/%<>|&^@])
    (?!\s*:\s*[A-Za-z_][\w.]*\s*(?:=|$|\[))""",
    re.VERBOSE,
)
# A whole line that is only a chat heading: "Explanation:", "Example usage:", "**Output**".
_CHAT_HEADING = re.compile(
    r"^\**(?:Explanation|Example(?:\s+usage)?|Usage|Output|Notes?|Changes|Summary|Test(?:\s+cases)?)\**\s*:?\**$"
)
# Markdown structure that no programming language writes at a line start.
_MARKDOWN = re.compile(
    r"^(?:\*\*[A-Z][^*]*\*\*(?::|\s|$)|\d+\.\s+(?:\*\*|[A-Z][a-z]+\s)|[-*]\s+(?:\*\*[A-Z]|`[^`]+`\s+[a-z]))"
)
# A plain English sentence: a capitalised word, two or more lower-case words, only letters and punctuation.
_SENTENCE = re.compile(r"^[A-Z][a-z]+(?:'[a-z]+)?(?:,?\s[a-z][a-z'-]*){2,}[.,:;!?]?$")
# Words that make "Name word word" code, not prose (Python's operators and clause words, and a few more).
_CODE_WORDS = frozenset(
    [
        "and",
        "or",
        "not",
        "in",
        "is",
        "if",
        "else",
        "for",
        "as",
        "from",
        "import",
        "lambda",
        "async",
        "await",
        "with",
        "return",
        "yield",
        "instanceof",
        "of",
        "new",
        "typeof",
    ]
)


def is_prose_line(line: str) -> bool:
    """Is this line of code (stripped) chat prose or Markdown rather than code?"""
    stripped = line.strip()
    if not stripped:
        return False
    if stripped.startswith(FENCE):
        return True
    if _CHAT_OPENER.match(stripped) or _CHAT_HEADING.match(stripped) or _MARKDOWN.match(stripped):
        return True
    if _SENTENCE.match(stripped):
        # A full stop ends no statement in these languages; without one, clause words make it code.
        words = re.findall(r"[A-Za-z']+", stripped)
        return stripped.endswith((".", "!", "?")) or not any(word in _CODE_WORDS for word in words[1:])
    return False


_TRIPLE = re.compile(r"\"\"\"|'''")


def _code_part(line: str) -> str:
    """The part of a line of code before a line comment (Python's `#`, C's `//`), strings skipped."""
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" or line.startswith("//", i):
            return line[:i]
        i += 1
    return line


def _fence_in_code(line: str) -> int | None:
    """Where a ``` fence starts in a line of code, outside its string literals and comments."""
    code = _code_part(_TRIPLE.sub("\0\0\0", line))
    found = code.find(FENCE)
    if found == -1:
        return None
    quotes = sum(code[:found].count(q) for q in "\"'")
    return found if quotes % 2 == 0 else None


def chat_artifact(text: str, literal: LiteralKind | None = None, final: bool = True) -> int | None:
    """Where chat output starts in a completion (rule 7), or None. `literal`: the comment or docstring the
    cursor is in (its text is prose by right; a line comment ends at the first line break). Unless `final`,
    the last line may still grow, so only a fence is judged there ("Explanation" may become code)."""
    in_string = literal == "docstring"
    start = 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        in_comment = index == 0 and literal == "comment"
        complete = final or index < len(lines) - 1
        if not in_string and not in_comment:
            if complete and is_prose_line(line) or line.lstrip().startswith(FENCE):
                return start
            fence = _fence_in_code(line)
            if fence is not None:
                return start + fence
        if not in_comment and len(_TRIPLE.findall(line)) % 2 == 1:
            in_string = not in_string
        start += len(line) + 1
    return None


def repeats_neighbour(first_line: str, line_before: str, rest_of_line: str, next_line: str) -> bool:
    """Does a suggestion whose first line is `first_line` only repeat what the file already has (rule 8)?
    `rest_of_line` and `next_line` are stripped, as `SyntaxStopRules` keeps them."""
    line = first_line.strip()
    if not line:
        return False
    if rest_of_line and line == rest_of_line:
        return True
    return bool(next_line) and (line_before + first_line).strip() == next_line


def first_line_span(text: str) -> tuple[int, int] | None:
    """Start and end of the first line of `text` with anything but whitespace on it, or None."""
    start = 0
    for line in text.split("\n"):
        if line.strip():
            return start, start + len(line)
        start += len(line) + 1
    return None


def first_line_confidence(text: str, token_probs: Sequence[float], token_ends: Sequence[int]) -> float | None:
    """The probability the model gave the first non-blank line of `text`: the product of the known
    probabilities of the tokens that wrote part of it (rule 9). None when there is no such line or no
    probability is known for it (NaN: a backend that did not say)."""
    probs = first_line_token_probs(text, token_probs, token_ends)
    return math.prod(probs) if probs else None


def first_line_token_probs(text: str, token_probs: Sequence[float], token_ends: Sequence[int]) -> list[float]:
    """The probabilities of the tokens that wrote part of the first non-blank line of `text`, in order (known
    ones only): what a gate on the first line reads. Token i wrote text[token_ends[i-1]:token_ends[i]] (the
    first from 0)."""
    span = first_line_span(text)
    if span is None:
        return []
    begin, end = span
    probs: list[float] = []
    previous = 0
    for prob, token_end in zip(token_probs, token_ends, strict=False):
        if token_end > begin and previous < end and not math.isnan(prob):
            probs.append(prob)
        previous = max(previous, token_end)
        if previous >= end:
            break
    return probs
