"""Context from other open documents: definitions the current file imports, and similar code.

- Imports: the names a file imports (Python, JavaScript/TypeScript, Go, Rust) are looked up among the open
  documents; each imported definition found there becomes a snippet (its first lines).
- Similar code: other documents are cut into overlapping windows of lines; a window's score is how many
  identifiers it shares with the lines around the cursor, weighted toward recently edited or visited files.

The cursor's own line is left out of the similarity query so typing within a line cannot reshuffle the
snippets, and the chosen snippets are emitted in a stable order (by path): the prompt's head stays cached.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tree_sitter import Node, Tree

from lsp_server.context.fim import Snippet
from lsp_server.context.syntax_context import identifiers_in
from lsp_server.context.trees import tree_for_prompt

if TYPE_CHECKING:
    from lsp_server.documents import Document

WINDOW_LINES = 16
WINDOW_STRIDE = 8
QUERY_LINES_BEFORE = 24
QUERY_LINES_AFTER = 8
MAX_LINE_CHARS = 400  # of a longer line (minified code), snippets and queries see only its start
DEFINITION_LINES = 12

# Keywords and common type names say nothing about which code is related.
_STOPWORD_TEXT = (
    "and the def class return import from self None True False for while else elif not with pass "
    "function const let var new this null undefined true false func package type struct impl pub use "
    "mut crate Self super async await yield try except finally raise throw catch case switch break "
    "continue interface export default string number bool int str float"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True)
class ScoredSnippet:
    snippet: Snippet
    score: float
    source_uri: str
    start_line: int


def display_path(uri: str, parts: int = 3) -> str:
    """A short, stable name for a document: the last few components of its path."""
    path = uri.split("://", 1)[-1]
    return "/".join(path.rstrip("/").split("/")[-parts:]).lstrip("/")


@functools.lru_cache(maxsize=64)
def _windows(text: str) -> tuple[tuple[int, str, frozenset[str]], ...]:
    """(start line, text, identifiers) of overlapping line windows; cached per text (documents that are
    not being edited keep the same str object, whose hash Python caches)."""
    lines = [line[:MAX_LINE_CHARS] for line in text.split("\n")]
    result = []
    for start in range(0, max(len(lines) - WINDOW_STRIDE, 1), WINDOW_STRIDE):
        chunk = "\n".join(lines[start : start + WINDOW_LINES]).strip("\n")
        if chunk.strip():
            result.append((start, chunk, identifiers_in(chunk) - _STOPWORDS))
    return tuple(result)


def query_identifiers(text: str, offset: int) -> frozenset[str]:
    """Identifiers on the lines around the cursor, leaving out the cursor's own line."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end == -1 else line_end
    reach = (QUERY_LINES_BEFORE + QUERY_LINES_AFTER + 2) * MAX_LINE_CHARS  # never more than these lines hold
    before = text[max(0, line_start - reach) : line_start].split("\n")[-QUERY_LINES_BEFORE - 1 :]
    after = text[line_end + 1 : line_end + 1 + reach].split("\n", QUERY_LINES_AFTER)[:QUERY_LINES_AFTER]
    return identifiers_in("\n".join(line[:MAX_LINE_CHARS] for line in before + after)) - _STOPWORDS


def similar_snippets(current: Document, offset: int, others: Sequence[Document]) -> list[ScoredSnippet]:
    """The best window of each other document, scored by shared identifiers and recency."""
    query = query_identifiers(current.text, offset)
    if not query:
        return []
    by_recency = sorted(others, key=lambda doc: doc.last_touched, reverse=True)
    result = []
    for rank, doc in enumerate(by_recency):
        best: tuple[int, int, str] | None = None
        for start, chunk, identifiers in _windows(doc.text):
            shared = len(identifiers & query)
            if shared and (best is None or shared > best[0]):
                best = (shared, start, chunk)
        if best is not None:
            recency = 1.0 / (1.0 + 0.2 * rank)
            snippet = Snippet(display_path(doc.uri), best[2])
            result.append(ScoredSnippet(snippet, best[0] * recency, doc.uri, best[1]))
    return result


# -- imports ------------------------------------------------------------------------------------
_PY_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n#]+))", re.MULTILINE)
_PY_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+)", re.MULTILINE)
_JS_IMPORT = re.compile(
    r"import\s+(?:type\s+)?(?:(\w+)\s*,?\s*)?(?:\{([^}]*)\}\s*)?(?:\*\s*as\s+\w+\s*)?from\s+['\"]([^'\"]+)['\"]"
    r"|require\(\s*['\"]([^'\"]+)['\"]\s*\)"
)
_GO_IMPORT = re.compile(r"\"([\w./-]+)\"")
_GO_IMPORT_BLOCK = re.compile(r"^import\s*(?:\(([^)]*)\)|(\"[^\"]+\"))", re.MULTILINE)
_RUST_USE = re.compile(
    r"^[ \t]*(?:pub[ \t]+)?use[ \t]+(?:crate|super|self)::([\w:]+?)(?:::\{([^}]*)\})?;", re.M
)

# (file path suffixes that would define the module, imported names; empty names = the whole module)
ImportTarget = tuple[tuple[str, ...], tuple[str, ...]]


def _names(text: str) -> tuple[str, ...]:
    names = []
    for part in text.replace("\n", ",").split(","):
        words = part.split()
        if words and words[0] != "type":
            names.append(words[0])
        elif len(words) > 1:
            names.append(words[1])
    return tuple(name for name in names if name.isidentifier())


def imports_of(text: str, language: str | None) -> list[ImportTarget]:
    """What `text` imports, as (candidate path suffixes, names)."""
    targets: list[ImportTarget] = []
    if language == "python":
        for module, grouped, names in _PY_FROM.findall(text):
            names = grouped or names
            path = module.lstrip(".").replace(".", "/")
            if path:
                targets.append(((f"{path}.py", f"{path}/__init__.py"), _names(names)))
        for module in _PY_IMPORT.findall(text):
            path = module.replace(".", "/")
            targets.append(((f"{path}.py", f"{path}/__init__.py"), ()))
    elif language in ("javascript", "typescript", "tsx"):
        for default, named, source, required in _JS_IMPORT.findall(text):
            module = source or required
            if not module.startswith("."):
                continue  # a package, not a workspace file
            base = module.lstrip("./")
            suffixes = tuple(
                f"{base}{ext}" for ext in (".ts", ".tsx", ".js", ".jsx", ".mjs", "/index.ts", "/index.js")
            )
            names = ((default,) if default else ()) + _names(named)
            targets.append(((base,) + suffixes if base.endswith((".js", ".ts")) else suffixes, names))
    elif language == "go":
        for block, single in _GO_IMPORT_BLOCK.findall(text):
            for path in _GO_IMPORT.findall(block or single):
                targets.append(((path.rsplit("/", 1)[-1] + "/",), ()))
    elif language == "rust":
        for path, names in _RUST_USE.findall(text):
            segments = path.split("::")
            # `use crate::a::b::item;` -> module a/b, item; `use crate::a::b::{x, y};` -> module a/b, x and y.
            module, items = (segments, _names(names)) if names else (segments[:-1], (segments[-1],))
            if module:
                module_path = "/".join(module)
                targets.append(((f"{module_path}.rs", f"{module_path}/mod.rs"), items))
    return targets


def _matches(uri: str, suffixes: Sequence[str]) -> bool:
    path = uri.split("://", 1)[-1]
    for suffix in suffixes:
        if suffix.endswith("/"):
            # A Go package: any file directly inside a directory of that name.
            if f"/{suffix}" in path and "/" not in path.split(f"/{suffix}", 1)[1]:
                return True
        elif path == suffix or path.endswith("/" + suffix):
            return True
    return False


def _definition_name(node: Node) -> str | None:
    name = node.child_by_field_name("name")
    if name is None:
        for child in node.named_children:  # const x = ..., type X struct, impl X
            inner = child.child_by_field_name("name") or child.child_by_field_name("type")
            if child.type in ("variable_declarator", "type_spec") and inner is not None:
                name = inner
                break
        if name is None and node.type == "impl_item":
            name = node.child_by_field_name("type")
    return name.text.decode("utf-8", "replace") if name is not None and name.text is not None else None


def top_level_definitions(tree: Tree) -> list[tuple[str, Node]]:
    """(name, node) for each named top-level definition, looking through export/decorator wrappers."""
    result = []
    for node in tree.root_node.named_children:
        target = node
        if node.type in ("export_statement", "decorated_definition"):
            inner = node.child_by_field_name("declaration") or node.child_by_field_name("definition")
            target = inner if inner is not None else node
        name = _definition_name(target)
        if name:
            result.append((name, node))
    return result


def _head(node: Node, max_lines: int) -> str:
    text = node.text.decode("utf-8", "replace") if node.text is not None else ""
    lines = text.split("\n")
    return "\n".join(lines[:max_lines]) + ("\n..." if len(lines) > max_lines else "")


def import_snippets(current: Document, others: Sequence[Document]) -> list[ScoredSnippet]:
    """Snippets with the definitions `current` imports from other open documents."""
    result: list[ScoredSnippet] = []
    for suffixes, names in imports_of(current.text, current.language):
        for doc in others:
            if not _matches(doc.uri, suffixes):
                continue
            tree = tree_for_prompt(doc)  # not a huge minified file's parse
            if tree is None:
                continue
            definitions = top_level_definitions(tree)
            if names:
                wanted = [node for name, node in definitions if name in names]
                parts = [_head(node, DEFINITION_LINES) for node in wanted]
            else:
                # The whole module: the first line (signature) of each definition.
                wanted = [node for _, node in definitions]
                parts = [_head(node, 1).split("\n")[0] for node in wanted[:24]]
            if parts:
                line = wanted[0].start_point[0]
                # Imported definitions outrank any similarity score.
                snippet = Snippet(display_path(doc.uri), "\n".join(parts))
                result.append(ScoredSnippet(snippet, 1000.0 + len(parts), doc.uri, line))
    return result


def snippet_tokens(text: str, count_tokens: Callable[[str], int]) -> int:
    """What a snippet of `text` costs in the prompt: its text and about 8 tokens for the path line before it."""
    return count_tokens(text) + 8


def select_snippets(
    current: Document,
    offset: int,
    others: Sequence[Document],
    *,
    max_snippets: int,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[Snippet]:
    """The best snippets within `max_snippets` and `budget_tokens`, in a stable (path) order."""
    if max_snippets <= 0 or budget_tokens <= 0:
        return []
    others = [doc for doc in others if doc.uri != current.uri]
    candidates = import_snippets(current, others) + similar_snippets(current, offset, others)
    candidates.sort(key=lambda c: (-c.score, c.snippet.path))
    chosen: list[ScoredSnippet] = []
    used = 0
    seen_sources: set[str] = set()  # one snippet per document: imported definitions win over similarity
    for candidate in candidates:
        if len(chosen) == max_snippets:
            break
        if candidate.source_uri in seen_sources:
            continue
        cost = snippet_tokens(candidate.snippet.text, count_tokens)
        if used + cost > budget_tokens:
            continue
        used += cost
        chosen.append(candidate)
        seen_sources.add(candidate.source_uri)
    chosen.sort(key=lambda c: (c.snippet.path, c.start_line))
    return [c.snippet for c in chosen]
