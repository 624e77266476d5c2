"""The local code corpus: the running interpreter's standard library plus any folders the user adds.

Held-out rule (documented in the model card): a file is held out for evaluation when the first byte of the
SHA-1 of its path relative to its corpus root is below 13 (about 5% of files). The rule depends only on the
relative path, so it is stable across machines and Python patch releases.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HELD_OUT_BYTE_BELOW = 13  # 13/256 ~ 5% of files
MAX_FILE_BYTES = 400_000  # generated tables and giant test files teach little
SKIPPED_DIRS = {"site-packages", "__pycache__", "idlelib", "lib2to3", "ensurepip"}


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to its corpus root, with forward slashes
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_held_out(relative_path: str) -> bool:
    return hashlib.sha1(relative_path.encode()).digest()[0] < HELD_OUT_BYTE_BELOW


def iter_source_files(roots: Iterable[Path], suffixes: tuple[str, ...] = (".py",)) -> list[SourceFile]:
    """Every source file under `roots`, sorted by path, decoded as UTF-8 with undecodable bytes replaced."""
    files: list[SourceFile] = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix not in suffixes or not path.is_file():
                continue
            relative = path.relative_to(root).as_posix()
            if SKIPPED_DIRS.intersection(relative.split("/")[:-1]):
                continue
            data = path.read_bytes()
            if not data.strip() or len(data) > MAX_FILE_BYTES:
                continue
            files.append(SourceFile(relative, data.decode("utf-8", errors="replace")))
    return files


def split_corpus(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, held_out) by the documented path-hash rule."""
    train = [f for f in files if not is_held_out(f.path)]
    held_out = [f for f in files if is_held_out(f.path)]
    return train, held_out
