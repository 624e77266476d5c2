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

At a line among a Python file's imports, the reader also says where the project defines the names the file
uses but does not bind (`definition_snippets`): it indexes the top-level names of the .py files of the
file's import root (the folder above its outermost package), at most MAX_INDEXED_FILES of them, re-listing
the folder after RESOLVE_TTL_S. The index is built aside, on a thread of its own, when a file is opened
(`prepare`), and refreshed aside when it is older than RESOLVE_TTL_S, so a keystroke at the imports reads
the index it has instead of listing the project; only a request for a root never prepared builds it.

The same index says what a `from` line there may import (`import_names`): every module of the import root and
the names each binds, and which of the names the file uses but lacks each could bring in (`wanted_imports`),
for the engine's import-line steering (`engine.imports`).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeGuard, TypeVar
from urllib.parse import unquote, urlparse

from engine.api import ANY_NAME
from lsp_server.context.definitions import (
    bound_names,
    code_only,
    dotted_uses,
    listed_names,
    top_level_definitions,
    unbound_names,
    without_line_at,
)
from lsp_server.context.snippets import imports_of
from lsp_server.documents import Document, new_document

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 8
MAX_CACHED_FILES = 128  # parsed files kept, oldest dropped first: memory stays flat in a long session
RESOLVE_TTL_S = 30.0
MAX_INDEXED_FILES = 2000
MAX_LISTED_ENTRIES = 20000
# Relative spellings down to this many dots are spelled out for the import-line steering (`import_names`), up to
# the outermost package (beyond it Python has none); deeper is not judged. Three recent projects write up to 5
# (a fifth of their relative imports have 3 or more: google/adk-python, openai-agents-python, strands-agents).
MAX_RELATIVE_DOTS = 5
MAX_INDEXES = 8  # import roots indexed at once (a workspace of many script folders has many)
MAX_DEFINITIONS = 12  # definition lines in the prompt, from at most this many modules too
AMBIGUOUS_MODULES = 3  # a name defined in more modules than this (`logger`, `main`) says nothing
_FROM = re.compile(r"from[ \t]+(\.*)([\w.]*)[ \t]+import\b")
_OPEN_NAMES = re.compile(r"^(?:from[ \t]+[\w.]+[ \t]+import[ \t]+\*|def[ \t]+__getattr__\b)", re.MULTILINE)
_SKIPPED_FOLDERS = frozenset({"node_modules", "site-packages", "__pycache__", "venv", "build", "dist"})


@dataclass(frozen=True)
class ModuleOutline:
    """What one .py file offers to the files that import it."""

    definitions: dict[str, str]  # its top-level names -> the line that defines each (`top_level_definitions`)
    # Every name it binds anywhere: what `from it import` may name, counted generously; ANY_NAME where a star
    # import or a module `__getattr__` (names made on demand) leaves them open.
    bound: frozenset[str]


# A file the index could not read (over MAX_FILE_BYTES, unreadable): the module exists, its names are unknown.
UNREAD = ModuleOutline({}, frozenset({ANY_NAME}))


class ModuleIndex:
    """The top-level names of the .py files under one import root, by name and by module."""

    def __init__(self, root: Path, files: dict[Path, ModuleOutline], complete: bool = True) -> None:
        self.root = root
        self.complete = complete  # every .py file under the root was listed (none left out by the limits)
        self.defined_in: dict[str, list[Path]] = {}
        self.modules: dict[str, list[Path]] = {}  # a module's last dotted part -> its files
        self.definitions = {
            path: outline.definitions for path, outline in files.items() if outline is not UNREAD
        }
        self.bound = {path: outline.bound for path, outline in files.items()}
        for path, names in self.definitions.items():
            for name in names:
                self.defined_in.setdefault(name, []).append(path)
            module = path.parent.name if path.name == "__init__.py" else path.stem
            self.modules.setdefault(module, []).append(path)

    def where_defined(self, name: str, here: Path) -> tuple[Path, str] | None:
        """(the module nearest `here` that defines `name`, its defining line), else (the module `name` is,
        its first definition's line or ""), else None; `here` itself never, nor a package that re-exports
        the name from `here`, nor a name more than AMBIGUOUS_MODULES modules define."""
        paths = [
            path
            for path in self.defined_in.get(name, [])
            if path != here and not _imports_from(self.definitions[path][name], path, here, self.root)
        ]
        if paths and len(paths) <= AMBIGUOUS_MODULES:
            path = _nearest(paths, here)
            return path, self.definitions[path][name]
        modules = [path for path in self.modules.get(name, []) if path != here]
        if not modules:
            return None
        path = _nearest(modules, here)
        return path, next(iter(self.definitions[path].values()), "")


class _MadeFromFiles(Generic[T]):
    """What was made from each file, made again only when the file's size or modification time changes; at
    most `max_entries` kept, the oldest made dropped first. Not thread-safe: the owner holds its lock."""

    def __init__(self, make: Callable[[Path, str], T], max_entries: int) -> None:
        self._make = make
        self._max_entries = max_entries
        self._entries: dict[Path, tuple[tuple[int, int], T]] = {}

    def get(self, path: Path) -> T | None:
        """What `make` made of the file's text; None for a file that cannot be read or is over
        MAX_FILE_BYTES."""
        try:
            stat = path.stat()
            if stat.st_size > MAX_FILE_BYTES:
                return None
            stamp = (stat.st_mtime_ns, stat.st_size)
            cached = self._entries.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return None
        made = self._make(path, text)
        self._entries.pop(path, None)
        self._entries[path] = (stamp, made)
        if len(self._entries) > self._max_entries:
            del self._entries[next(iter(self._entries))]
        return made

    def keep_only(self, paths: set[Path]) -> None:
        self._entries = {path: entry for path, entry in self._entries.items() if path in paths}


def _parsed_document(path: Path, text: str) -> Document:
    document = new_document(path.as_uri(), "", 0, text)
    _ = document.tree  # parsed here, under the lock: a parser serves one thread at a time
    return document


def binds_on_demand(code: str) -> bool:
    """Whether a module's code (`code_only`) leaves its names open: a star import, or a module `__getattr__`."""
    return _OPEN_NAMES.search(code) is not None


def _module_outline(path: Path, text: str) -> ModuleOutline:
    # Names bound in a block (`try:` around an import, `if TYPE_CHECKING:`) are importable too: a name counted
    # that is not lets a wrong import through; one missed would steer a right one away (`engine.imports`).
    code = code_only(text)
    bound = frozenset(bound_names(code)) | frozenset(listed_names(text))
    if binds_on_demand(code):
        bound |= {ANY_NAME}
    return ModuleOutline(top_level_definitions(text, reexports=path.name == "__init__.py"), bound)


def importable(
    index: ModuleIndex, here: Path, defined_elsewhere: bool = False
) -> tuple[dict[str, frozenset[str]], int]:
    """(each module a `from` line in file `here` could spell -> the names importable from it, how many
    leading dots its relative spellings go to): absolute dotted spellings from the import root, and relative
    ones from `here`'s package and, inside the root, its parent. A package's names include its submodules.
    `defined_elsewhere`: only the names each module defines (a package: exports), `here` left out (where
    a missing import should come from, not each module that imports the name in turn)."""
    names_of = index.definitions if defined_elsewhere else index.bound
    parts_of = {
        path: _module_parts(path, index.root) for path in names_of if not (defined_elsewhere and path == here)
    }
    names: dict[tuple[str, ...], set[str]] = {}
    for path, parts in parts_of.items():
        names.setdefault(parts, set()).update(names_of[path])
        for depth in range(len(parts)):  # each package above the module holds it as a submodule
            names.setdefault(parts[:depth], set()).add(parts[depth])
    frozen = {parts: frozenset(found) for parts, found in names.items()}
    modules = {".".join(parts): found for parts, found in frozen.items() if len(parts) > 1}
    package = _module_parts(here.parent / "__init__.py", index.root)
    depth = 0
    while depth < MAX_RELATIVE_DOTS and depth < len(package):
        base = package[: len(package) - depth]
        dots = "." * (depth + 1)
        for parts, found in frozen.items():
            if parts[: len(base)] == base:
                modules[dots + ".".join(parts[len(base) :])] = found
        depth += 1
    return modules, depth


def _holds(module: Path, here: Path) -> bool:
    """Whether `module` is `here` or a package `here` is inside."""
    return module == here or (module.name == "__init__.py" and here.is_relative_to(module.parent))


def _module_parts(path: Path, root: Path) -> tuple[str, ...]:
    """The dotted parts a module is imported by from `root` (a package is its folder)."""
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1:] == ("__init__",) else parts


def _nearest(paths: Sequence[Path], here: Path) -> Path:
    """The path that shares the most folders with `here` (then the shortest)."""

    def shared(path: Path) -> int:
        return len([1 for a, b in zip(path.parts, here.parts, strict=False) if a == b])

    # On a tie, a package's __init__.py: what a package exports is imported from the package.
    return max(
        paths, key=lambda path: (shared(path), -len(path.parts), path.name == "__init__.py", str(path))
    )


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
        self._files = _MadeFromFiles(_parsed_document, MAX_CACHED_FILES)
        self._resolved: dict[tuple[tuple[str, ...], Path], tuple[float, Path | None]] = {}
        self._indexes: dict[Path, tuple[float, ModuleIndex]] = {}  # under _lock
        self._refreshing: set[Path] = set()  # roots being indexed aside, under _lock
        # One index is built at a time; `_outlines` belongs to the builder. A request that finds an index,
        # fresh or not, never waits on this lock.
        self._build_lock = threading.Lock()
        # Top-level names of every indexed file; pruned to the files of the indexes kept (`_build_index`).
        self._outlines = _MadeFromFiles(_module_outline, MAX_INDEXES * MAX_INDEXED_FILES)
        # The last file's importable modules (`importable`, by `defined_elsewhere`) and the index they came
        # from: lines typed at its imports reuse them.
        self._importable: dict[bool, tuple[Path, ModuleIndex, tuple[dict[str, frozenset[str]], int]]] = {}

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
                document = self._files.get(path)
                if document is not None:
                    found.append(document)
                if len(found) == MAX_FILES:
                    break
        return found

    def definition_snippets(self, current: Document, offset: int) -> tuple[str, list[tuple[str, str]]]:
        """(the current file's path from its import root, (path, text) snippets: the first line of each
        definition the project holds for a name `current` uses but does not bind, or the module such a name
        is, in path order); the line at `offset` is left out. ("", []) for a file outside the workspace
        folders or larger than MAX_FILE_BYTES."""
        here, root = self._place_of(current)
        if here is None or root is None or len(current.text) > MAX_FILE_BYTES:
            return "", []
        index = self._current_index(root)
        chosen: dict[Path, list[str]] = {}
        count = 0
        for name in unbound_names(without_line_at(current.text, offset)):
            found = index.where_defined(name, here)
            if found is None:
                continue
            lines = chosen.setdefault(found[0], [])
            if found[1] not in lines:
                lines.append(found[1])
                count += 1
            if count >= MAX_DEFINITIONS or len(chosen) >= MAX_DEFINITIONS:
                break
        snippets = [
            (path.relative_to(root).as_posix(), "\n".join(line for line in lines if line))
            for path, lines in sorted(chosen.items())
        ]
        return here.relative_to(root).as_posix(), snippets

    def import_names(self, current: Document) -> tuple[dict[str, frozenset[str]], int] | None:
        """What a `from` line of `current` may import (`importable`); None outside the workspace folders and
        where the index could not list every file (a module left out would look like one that does not exist)."""
        here, root = self._place_of(current)
        if here is None or root is None:
            return None
        index = self._current_index(root)
        if not index.complete:
            return None
        return self._importable_from(index, here)

    def submodules(self, current: Document) -> frozenset[str] | None:
        """The modules and subpackages of the package whose `__init__.py` `current` is (none for another module);
        None outside the workspace folders and where the index could not list every file."""
        here, root = self._place_of(current)
        if here is None or root is None:
            return None
        if here.name != "__init__.py":
            return frozenset()
        index = self._current_index(root)
        if not index.complete:
            return None
        package = here.parent
        return frozenset(
            path.parent.name if path.name == "__init__.py" else path.stem
            for path in index.bound
            if path != here
            and package in (path.parent, path.parent.parent if path.name == "__init__.py" else None)
        )

    def wanted_imports(
        self, current: Document, offset: int
    ) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
        """The missing import at `offset`'s line of `current`: (each module spelling -> the names `current` uses
        but does not bind, the line at `offset` left out, that the module binds and another file of the
        workspace defines or is; those of the names no file of the workspace defines or is). Empty outside the
        workspace folders and where the index could not list every file."""
        here, root = self._place_of(current)
        if here is None or root is None or len(current.text) > MAX_FILE_BYTES:
            return {}, frozenset()
        index = self._current_index(root)
        if not index.complete:
            return {}, frozenset()
        used = unbound_names(without_line_at(current.text, offset))
        if not used:
            return {}, frozenset()
        # A name is imported from the workspace where another file defines it or is that module; not where
        # only the file itself defines it (its own line is missing), nor as the package the file is in
        # (`bigquery` in tools/bigquery/client.py is `google.cloud`'s).
        in_workspace = {
            name
            for name in used
            if any(path != here for path in index.defined_in.get(name, ()))
            or any(not _holds(path, here) for path in index.modules.get(name, ()))
        }
        elsewhere = frozenset(
            name for name in used if name not in in_workspace and here not in index.defined_in.get(name, ())
        )
        modules = {
            module: names & in_workspace
            for module, names in self._importable_from(index, here, defined_elsewhere=True)[0].items()
            if not names.isdisjoint(in_workspace)
        }
        return modules, elsewhere

    def wanted_modules(self, current: Document, offset: int, elsewhere: frozenset[str]) -> frozenset[str]:
        """Of `elsewhere` (names `current` uses and nothing binds; `wanted_imports`), the standard library's
        modules it uses whole, the line at `offset` left out (`standard_modules_used`)."""
        if not elsewhere:
            return frozenset()
        return standard_modules_used(without_line_at(current.text, offset), elsewhere)

    def _importable_from(
        self, index: ModuleIndex, here: Path, defined_elsewhere: bool = False
    ) -> tuple[dict[str, frozenset[str]], int]:
        """`importable`, kept for the last file and index asked."""
        cached = self._importable.get(defined_elsewhere)
        if cached is None or cached[0] != here or cached[1] is not index:
            cached = (here, index, importable(index, here, defined_elsewhere))
            self._importable[defined_elsewhere] = cached
        return cached[2]

    def prepare(self, current: Document) -> None:
        """Start indexing `current`'s import root aside, unless a fresh index or a build is there already: the
        first keystroke at its imports then finds the index built (a file just opened)."""
        _, root = self._place_of(current)
        if root is not None:
            self._refresh_aside(root)

    def _place_of(self, current: Document) -> tuple[Path | None, Path | None]:
        """(the document's resolved path, its import root), None for what it does not have."""
        path = path_of(current.uri)
        here = path.resolve() if path is not None else None
        return here, self._import_root(here) if here is not None else None

    def _import_root(self, here: Path) -> Path | None:
        """The folder Python imports `here` from: above its outermost package, within a workspace folder."""
        home = next((root for root in self.roots if here.is_relative_to(root)), None)
        if home is None:
            return None
        folder = here.parent
        while folder != home and (folder / "__init__.py").is_file():
            folder = folder.parent
        return folder

    def _current_index(self, root: Path) -> ModuleIndex:
        """The index of `root` as it is, a refresh started aside where it is old; built here only when there
        is none yet (or the build under way is waited for)."""
        with self._lock:
            cached = self._indexes.get(root)
        if cached is None:
            return self._build_index(root)
        if not _fresh(cached):
            self._refresh_aside(root)
        return cached[1]

    def _refresh_aside(self, root: Path) -> None:
        with self._lock:
            cached = self._indexes.get(root)
            if _fresh(cached) or root in self._refreshing:
                return
            self._refreshing.add(root)
        threading.Thread(
            target=self._refresh, args=(root,), name="specls-workspace-index", daemon=True
        ).start()

    def _refresh(self, root: Path) -> None:
        try:
            self._build_index(root)
        except Exception:  # a thread of its own: say why, and the next request tries again
            log.exception("indexing the workspace folder %s failed", root)
        finally:
            with self._lock:
                self._refreshing.discard(root)

    def _build_index(self, root: Path) -> ModuleIndex:
        with self._build_lock:
            with self._lock:  # built while this thread waited for the builder
                cached = self._indexes.get(root)
            if _fresh(cached):
                return cached[1]
            started = time.monotonic()
            files: dict[Path, ModuleOutline] = {}
            paths, complete = _python_files(root)
            for path in paths:
                files[path] = self._outlines.get(path) or UNREAD
            index = ModuleIndex(root, files, complete)
            log.info(
                "indexed %d files under %s in %.0f ms", len(files), root, (time.monotonic() - started) * 1000
            )
            with self._lock:
                self._indexes.pop(root, None)
                self._indexes[root] = (started, index)
                if len(self._indexes) > MAX_INDEXES:  # the oldest built goes: memory stays flat
                    del self._indexes[next(iter(self._indexes))]
                kept = {path for _, other in self._indexes.values() for path in other.definitions}
            self._outlines.keep_only(kept)
            return index

    def _resolve(self, suffixes: tuple[str, ...], folder: Path | None) -> Path | None:
        key = (suffixes, folder or Path())
        cached = self._resolved.get(key)
        if _fresh(cached):
            return cached[1]
        path = self._find(suffixes, folder)
        self._resolved[key] = (time.monotonic(), path)
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


def _fresh(entry: tuple[float, T] | None) -> TypeGuard[tuple[float, T]]:
    """Whether a (time made, value) entry is younger than RESOLVE_TTL_S."""
    return entry is not None and time.monotonic() - entry[0] < RESOLVE_TTL_S


def _imports_from(line: str, importer: Path, module: Path, root: Path) -> bool:
    """Whether `line` of file `importer` (a package re-exporting a name) imports from `module`: it then says
    only that the file being written defines the name, not where to import it from."""
    match = _FROM.match(line)
    if match is None:
        return False
    dots, dotted = match.groups()
    base = importer.parent
    for _ in range(len(dots) - 1):
        base = base.parent
    target = (base if dots else root).joinpath(*dotted.split(".")) if dotted else base
    return module in (target.with_suffix(".py"), target / "__init__.py")


def _python_files(root: Path) -> tuple[list[Path], bool]:
    """(the .py files under `root`, hidden and tool folders left out, at most MAX_INDEXED_FILES (nearest the
    root first) and no more than MAX_LISTED_ENTRIES looked at (a huge tree of other files); whether that was
    all of them)."""
    found: list[Path] = []
    folders = [root]
    listed = 0
    left_out = False
    while folders and not left_out and listed < MAX_LISTED_ENTRIES:
        folder = folders.pop(0)
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        listed += len(entries)
        for entry in entries:
            if entry.name.startswith(".") or entry.name in _SKIPPED_FOLDERS or entry.is_symlink():
                continue
            if entry.is_dir():
                folders.append(entry)
            elif entry.suffix == ".py":
                if len(found) < MAX_INDEXED_FILES:
                    found.append(entry)
                else:
                    left_out = True
    return found, not folders and not left_out


def standard_modules_used(text: str, names: Iterable[str]) -> frozenset[str]:
    """Of `names` (used in `text`, bound nowhere), the standard library's modules `text` uses as modules: only
    dotted into, for attributes the module has (`copy` in `copy.deepcopy(x)`). Only modules this process has
    loaded are read: importing one to look could run its code. A name an installed package exports too
    (`types` of google.genai, used as `types.Content`) reads attributes the standard module lacks: it stays a
    name to import `from` somewhere."""
    found = set()
    for name in names:
        module = sys.modules.get(name)
        if module is None or name not in sys.stdlib_module_names:
            continue
        attributes = dotted_uses(text, name)
        if attributes and all(hasattr(module, attribute) for attribute in attributes):
            found.add(name)
    return frozenset(found)
