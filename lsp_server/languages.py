"""Which tree-sitter grammar parses which LSP language id, and the per-language syntax facts.

Grammars come from the individual wheels (tree-sitter-python, -javascript, -typescript, -go, -rust), which
work offline; anything else gets no tree and the indentation/bracket fallback.

Below both of its users, and so outside `context/`: the document store parses with it (`documents.py`) and the
context package reads its syntax facts (`context/syntax.py`, `context/builder.py`), which also reads the
documents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from tree_sitter import Language, Parser


@dataclass(frozen=True)
class LanguageSpec:
    name: str  # canonical name: "python", "javascript", "typescript", "tsx", "go", "rust"
    comment_types: frozenset[str]
    string_types: frozenset[str]
    # Python closes blocks by dedent; the others with a closing brace.
    indent_blocks: bool
    line_comment: str


def _python() -> object:
    import tree_sitter_python

    return tree_sitter_python.language()


def _javascript() -> object:
    import tree_sitter_javascript

    return tree_sitter_javascript.language()


def _typescript() -> object:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_typescript()


def _tsx() -> object:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_tsx()


def _go() -> object:
    import tree_sitter_go

    return tree_sitter_go.language()


def _rust() -> object:
    import tree_sitter_rust

    return tree_sitter_rust.language()


_JS_STRINGS = frozenset({"string", "template_string", "string_fragment", "regex"})
_SPECS: dict[str, tuple[LanguageSpec, Callable[[], object]]] = {
    "python": (
        LanguageSpec(
            "python",
            frozenset({"comment"}),
            frozenset({"string", "string_content", "string_start", "string_end"}),
            True,
            "#",
        ),
        _python,
    ),
    "javascript": (LanguageSpec("javascript", frozenset({"comment"}), _JS_STRINGS, False, "//"), _javascript),
    "typescript": (LanguageSpec("typescript", frozenset({"comment"}), _JS_STRINGS, False, "//"), _typescript),
    "tsx": (LanguageSpec("tsx", frozenset({"comment"}), _JS_STRINGS, False, "//"), _tsx),
    "go": (
        LanguageSpec(
            "go",
            frozenset({"comment"}),
            frozenset({"interpreted_string_literal", "raw_string_literal", "rune_literal"}),
            False,
            "//",
        ),
        _go,
    ),
    "rust": (
        LanguageSpec(
            "rust",
            frozenset({"line_comment", "block_comment", "doc_comment"}),
            frozenset({"string_literal", "raw_string_literal", "char_literal", "string_content"}),
            False,
            "//",
        ),
        _rust,
    ),
}

# LSP language ids (and common aliases) to grammar names.
_ALIASES = {
    "python": "python",
    "javascript": "javascript",
    "javascriptreact": "javascript",  # tree-sitter-javascript parses JSX
    "typescript": "typescript",
    "typescriptreact": "tsx",
    "go": "go",
    "rust": "rust",
}
_EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}


def canonical_language(language_id: str, uri: str = "") -> str | None:
    """The grammar name for an LSP language id, falling back to the URI's extension; None if unsupported."""
    name = _ALIASES.get(language_id.lower())
    if name is None:
        dot = uri.rfind(".")
        if dot > uri.rfind("/"):
            name = _EXTENSIONS.get(uri[dot:].lower())
    return name


def language_spec(name: str | None) -> LanguageSpec | None:
    entry = _SPECS.get(name) if name else None
    return entry[0] if entry else None


@functools.cache
def _language(name: str) -> Language:
    return Language(_SPECS[name][1]())


def new_parser(name: str | None) -> Parser | None:
    """A fresh parser (parsers are not thread-safe, so each document store owns its own)."""
    if name not in _SPECS:
        return None
    assert name is not None
    return Parser(_language(name))
