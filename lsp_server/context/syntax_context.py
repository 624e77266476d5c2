"""Which syntax context the next token is in ("indentation", "closing", "after-operator", ...).

`syntax_context_of` names the situation before the next token (one of SYNTAX_CONTEXTS); `syntax_classifier`
binds the identifiers of the file. `specls bench draft-length` reports how long drafts hold in each context.
The contexts differ (copied text holds far longer in a repeated line than after an operator), but sizing
drafts by them lost to the engine's context-free policy (`engine.drafters.length`), so requests do not carry
the classifier.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from engine.words import NAME, is_word_char, word_start
from lsp_server.context.syntax import CLOSERS, OPENERS

# Names the syntax context of the next token from the text before it.
SyntaxClassifier = Callable[[str], str]

SYNTAX_CONTEXTS = (
    "indentation",  # right after a newline: whitespace comes next
    "closing",  # right after a closing bracket: `:`, `)`, `;` or a newline usually follow
    "known-identifier",  # inside a word that starts an identifier already in the file
    "repeated",  # the line so far starts like an earlier line (repeated structure)
    "identifier",  # inside a word that matches nothing seen
    "other",
    "after-open",  # right after an opening bracket: the first argument is a choice
    "after-operator",  # right after an operator or comma: an operand is a choice
    "statement-start",  # indentation done, a new statement begins: the biggest choice
)

_OPERATOR_CHARS = set("=+-*/%<>!&|^~,.?:@")


def identifiers_in(text: str, min_length: int = 3) -> frozenset[str]:
    return frozenset(word for word in NAME.findall(text) if len(word) >= min_length)


def syntax_context_of(text_before: str, known_identifiers: Iterable[str] = ()) -> str:
    """Name the syntax context of the next token, given the text before it (one of SYNTAX_CONTEXTS)."""
    line_start = text_before.rfind("\n") + 1
    line = text_before[line_start:]
    if line_start > 0 and line == "":
        return "indentation"
    if line.strip() == "":
        return "statement-start" if line else "other"
    code = line.lstrip()
    if len(code) >= 4 and _starts_an_earlier_line(text_before[:line_start], code):
        return "repeated"
    last = line[-1]
    if last in CLOSERS:
        return "closing"
    if last in OPENERS:
        return "after-open"
    if is_word_char(last):
        start = word_start(line)
        word = line[start:]
        if NAME.fullmatch(word) is None:
            return "other"  # digits
        earlier = text_before[: line_start + start]
        known = set(known_identifiers) | set(NAME.findall(earlier))
        if any(name.startswith(word) and name != word for name in known):
            return "known-identifier"
        return "identifier"
    stripped = line.rstrip()
    if stripped and stripped[-1] in _OPERATOR_CHARS:
        return "after-operator"
    if stripped and stripped[-1] in OPENERS:
        return "after-open"
    return "other"


def _starts_an_earlier_line(earlier_text: str, code: str) -> bool:
    # Compare against stripped earlier lines (indentation may differ), in a bounded window.
    return any(
        stripped.startswith(code) and len(stripped) > len(code)
        for stripped in (line.lstrip() for line in earlier_text[-4000:].split("\n"))
    )


def syntax_classifier(known_identifiers: Iterable[str] = ()) -> SyntaxClassifier:
    """`syntax_context_of` for one file: identifiers already in it count as known."""
    return functools.partial(syntax_context_of, known_identifiers=frozenset(known_identifiers))
