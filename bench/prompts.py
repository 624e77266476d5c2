"""Fixed code-completion prompts from held-out local code, built exactly as the server builds them.

Source: the running interpreter's standard library, restricted to the files that
`engine.train.corpus.is_held_out` holds out of training (the first byte of the SHA-1 of the path relative
to the stdlib root is below 13, about 5% of files), so the bundled pair never saw them. Files are taken in
path order; in each, the cursor goes to the first code line at or after 60% of the file, after its
indentation, and the rest of that line is deleted: the situation of writing a new line in the middle of
a file. The prompt then comes from `lsp_server.context.build_completion_context` (SPM FIM for the bundled
pair, the same token budget and snippet rules as `specls serve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.api import BackendInfo
from engine.train.corpus import MAX_FILE_BYTES, SKIPPED_DIRS, is_held_out, stdlib_root
from lsp_server.context import CompletionContext, ContextSettings, build_completion_context
from lsp_server.documents import DocumentStore

MIN_LINES = 40  # shorter files give too little context to complete from
CURSOR_FRACTION = 0.6


@dataclass(frozen=True)
class BenchPrompt:
    name: str  # "<relative path>:<line>" of the cursor (1-based line)
    document: str  # the document text as the editor holds it (the cursor line's code removed)
    offset: int  # cursor, as an index into `document`
    removed: str  # the code that was on the cursor line: what the user is about to type
    context: CompletionContext


def held_out_files(root: Path | None = None) -> list[tuple[str, str]]:
    """(relative path, text) of every held-out .py file under `root` (default: the stdlib), in path order."""
    root = root if root is not None else stdlib_root()
    files: list[tuple[str, str]] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not is_held_out(relative) or SKIPPED_DIRS.intersection(relative.split("/")[:-1]):
            continue
        data = path.read_bytes()
        if data.strip() and len(data) <= MAX_FILE_BYTES:
            files.append((relative, data.decode("utf-8", errors="replace")))
    return files


def cursor_in(text: str) -> tuple[int, int, str] | None:
    """(line index, cursor offset, removed code) for the documented cursor rule, or None if no code line."""
    lines = text.split("\n")
    if len(lines) < MIN_LINES:
        return None
    start = int(len(lines) * CURSOR_FRACTION)
    for index in range(start, len(lines)):
        code = lines[index].strip()
        if code and not code.startswith(("#", '"', "'", "@")):
            indent = len(lines[index]) - len(lines[index].lstrip())
            offset = sum(len(line) + 1 for line in lines[:index]) + indent
            return index, offset, lines[index][indent:]
    return None


def build_prompts(
    info: BackendInfo,
    count_tokens: Callable[[str], int],
    count: int,
    settings: ContextSettings | None = None,
    files: list[tuple[str, str]] | None = None,
) -> list[BenchPrompt]:
    """Up to `count` prompts, one per held-out file, skipping cursors where the server would not complete."""
    settings = settings or ContextSettings()
    prompts: list[BenchPrompt] = []
    for relative, text in files if files is not None else held_out_files():
        if len(prompts) >= count:
            break
        found = cursor_in(text)
        if found is None:
            continue
        line, offset, removed = found
        document = text[:offset] + text[offset + len(removed) :]
        store = DocumentStore()
        uri = f"file:///stdlib/{relative}"
        store.open(uri, "python", 1, document)
        context = build_completion_context(store, uri, offset, info, settings, count_tokens)
        if context.mode == "none" or not context.prompt:
            continue
        prompts.append(BenchPrompt(f"{relative}:{line + 1}", document, offset, removed, context))
    return prompts
