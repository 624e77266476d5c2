"""Files that an open document imports but the editor has not opened, read from the workspace on disk.

The module a line calls into is rarely open in the editor, yet its names are what the next line needs
(`specls bench lines`, docs/line-starts.md). Its definitions become snippets the same way an open file's do
(`snippets.import_snippets`). Limits, so a prompt never waits on the disk for long and never leaves the
user's project:
- only files inside the workspace folders the client named (after resolving links);
- at most MAX_FILE_BYTES a file and MAX_FILES a prompt;
- a file is read and parsed once, and again only when its size or modification time changes; where an
  import leads is looked up again after RESOLVE_TTL_S (files appear and vanish).
Nothing is written, and nothing but these reads happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsp_server.context.snippets import imports_of
from lsp_server.documents import Document, new_document

MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 8
MAX_CACHED_FILES = 128  # parsed files kept, oldest dropped first: memory stays flat in a long session
RESOLVE_TTL_S = 30.0


def path_of(uri: str) -> Path | None:
    """The local path of a file: URI, or None for any other scheme."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


class WorkspaceFiles:
    """Reads imported files under `roots`; safe to share between the server's threads."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = tuple(root.resolve() for root in roots)
        self._lock = threading.Lock()
        self._files: dict[Path, tuple[tuple[int, int], Document]] = {}
        self._resolved: dict[tuple[tuple[str, ...], Path], tuple[float, Path | None]] = {}

    @classmethod
    def from_uris(cls, uris: Sequence[str]) -> WorkspaceFiles | None:
        """The reader for the client's workspace folders (file: URIs that are directories); None when there
        are none, so a lone file never makes the server read its surroundings."""
        roots = [path for path in map(path_of, uris) if path is not None and path.is_dir()]
        return cls(roots) if roots else None

    def imported_documents(self, current: Document, open_uris: Sequence[str]) -> list[Document]:
        """The files `current` imports that are in the workspace and not open, read (or cached) now."""
        here = path_of(current.uri)
        open_paths = {path for path in map(path_of, open_uris) if path is not None}
        found: list[Document] = []
        seen: set[Path] = set()
        with self._lock:
            for suffixes, _names in imports_of(current.text, current.language):
                path = self._resolve(suffixes, here.parent if here is not None else None)
                if path is None or path in seen or path in open_paths or path == here:
                    continue
                seen.add(path)
                document = self._read(path)
                if document is not None:
                    found.append(document)
                if len(found) == MAX_FILES:
                    break
        return found

    def _resolve(self, suffixes: tuple[str, ...], folder: Path | None) -> Path | None:
        key = (suffixes, folder or Path())
        cached = self._resolved.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < RESOLVE_TTL_S:
            return cached[1]
        path = self._find(suffixes, folder)
        self._resolved[key] = (now, path)
        return path

    def _find(self, suffixes: tuple[str, ...], folder: Path | None) -> Path | None:
        # Relative imports start from the importing file's folder (or its parent: `..`); absolute ones from
        # a workspace root, or its src/ folder (the src layout).
        bases = [folder, folder.parent] if folder is not None else []
        bases += [base for root in self.roots for base in (root, root / "src")]
        for base in bases:
            for suffix in suffixes:
                if suffix.endswith("/"):  # a Go package folder: not one file
                    continue
                candidate = base / suffix
                if candidate.is_file():
                    resolved = candidate.resolve()
                    if any(resolved.is_relative_to(root) for root in self.roots):
                        return resolved
        return None

    def _read(self, path: Path) -> Document | None:
        try:
            stat = path.stat()
            if stat.st_size > MAX_FILE_BYTES:
                return None
            stamp = (stat.st_mtime_ns, stat.st_size)
            cached = self._files.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return None
        document = new_document(path.as_uri(), "", 0, text)
        _ = document.tree  # parsed here, under the lock: a parser serves one thread at a time
        self._files.pop(path, None)
        self._files[path] = (stamp, document)
        if len(self._files) > MAX_CACHED_FILES:
            del self._files[next(iter(self._files))]
        return document
