"""Load a target and a draft model: the bundled pair, a pulled catalog model (`smollm2-135m`), a local
Hugging Face folder, or a hub id.

Only a hub id may touch the network, and only because the user named it; a catalog name resolves to its
folder in the cache or fails with the `specls pull` command to run. A pair whose tokenizers differ is
refused: speculative verification compares token ids, so both models must speak the same ones. A catalog
model's default draft is the one distilled for it (`specls train --teacher`) when it ships; a target
without a draft of its own tokenizer runs with no draft model (`draft="none"`): the copying drafters still
speculate.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.hardware import OVERHEAD_BOUND_PARAMS, native_bf16
from engine.hardware import SINGLE_THREAD_BELOW_PARAMS as SINGLE_THREAD_BELOW_PARAMS
from engine.hardware import configure_threads as configure_threads

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
Role = Literal["target", "draft"]
NO_DRAFT = "none"  # draft spec: no draft model; lookup, suffix and stale drafters still run

# "org/name" or "name" with the characters the hub allows; anything else is treated as a path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded; the message says which path and what to do."""


@dataclass(frozen=True)
class ModelSource:
    spec: str  # what the user asked for ("bundled", a path or a hub id)
    location: str  # a local folder, or the hub id itself
    is_local: bool


@dataclass
class ModelPair:
    target: PreTrainedModel
    draft: PreTrainedModel | None  # None: no draft model shares the target's tokenizer
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    target_source: ModelSource
    draft_source: ModelSource | None
    dtype_reason: str = ""  # why this dtype (`choose_dtype`), for doctor and info


def resolve_model_path(spec: str | None, role: Role = "target") -> ModelSource:
    """None or "bundled" -> engine/bundled/<role>; a catalog name -> its pulled folder; an existing folder
    -> that folder; else a hub id.

    A catalog name that is not pulled is an error naming `specls pull`, never a download. A spec that looks
    like a path (starts with /, ., ~ or contains a backslash) but does not exist is an error, never a hub
    lookup.
    """
    from engine.catalog import CATALOG, NotPulledError, pulled_folder

    if spec in CATALOG:
        try:
            return ModelSource(spec=spec, location=str(pulled_folder(spec)), is_local=True)
        except NotPulledError as exc:
            raise ModelLoadError(str(exc)) from exc
    if spec is None or spec == "bundled":
        folder = BUNDLED_DIR / role
        if not (folder / "config.json").is_file():
            raise ModelLoadError(
                f"the bundled {role} model is missing at {folder}: train it with `specls train`, "
                f"or pass --{role} PATH_OR_HUB_ID"
            )
        return ModelSource(spec="bundled", location=str(folder), is_local=True)
    expanded = Path(os.path.expanduser(spec))
    if expanded.is_dir():
        return ModelSource(spec=spec, location=str(expanded.resolve()), is_local=True)
    if expanded.exists():
        raise ModelLoadError(f"{role} model path {spec!r} is a file; expected a Hugging Face model folder")
    looks_like_path = spec.startswith(("/", ".", "~")) or "\\" in spec or spec.count("/") > 1
    if looks_like_path or not _HUB_ID.match(spec):
        raise ModelLoadError(f"{role} model folder {spec!r} does not exist")
    if (near := close_catalog_name(spec, CATALOG)) is not None:
        raise ModelLoadError(
            f"unknown {role} model {spec!r}: did you mean {near!r}? (catalog: {', '.join(sorted(CATALOG))}; "
            "a hub id has the form org/name)"
        )
    return ModelSource(spec=spec, location=spec, is_local=False)


def close_catalog_name(spec: str, names: Iterable[str]) -> str | None:
    """The catalog name `spec` looks like a typo of (`smollm2` for `smollm2-135m`), or None. Only a bare
    name (no org/) can be one; such a near miss must never become a hub lookup."""
    if "/" in spec:
        return None
    lowered = {name.lower(): name for name in names}
    key = spec.lower()
    starts = [
        n for low, n in lowered.items() if len(key) >= 4 and (low.startswith(key) or key.startswith(low))
    ]
    if starts:
        return min(starts, key=len)
    near = difflib.get_close_matches(key, list(lowered), n=1, cutoff=0.75)
    return lowered[near[0]] if near else None


def check_model_folder(folder: Path, role: Role) -> None:
    """Fail early, with the file name, on a folder that cannot hold a loadable checkpoint."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{role} model folder {folder} has no config.json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{role} model config {config_path} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{role} model config {config_path} has no model_type")
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        raise ModelLoadError(f"{role} model folder {folder} has no model.safetensors weights")


def pick_device(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was requested but CUDA is not available")
    return resolved


DTYPE_NAMES = ("auto", "fp32", "bf16")
# bf16 pays on a CPU only where the weights' memory traffic is the cost: at the bundled pair's 10M
# parameters a step is per-call overhead and whole-model bf16 measured slower than fp32 (STACK-NOTES).
BF16_MIN_PARAMS = OVERHEAD_BOUND_PARAMS


def cpu_bf16_support(cpuinfo: str | None = None) -> tuple[bool, str]:
    """Whether this CPU computes bf16 natively under torch's capability (`engine.hardware.native_bf16`)."""
    return native_bf16(cpuinfo)


def choose_dtype(
    requested: str, device_type: str, target_params: int | None, bf16_native: tuple[bool, str]
) -> tuple[str, str]:
    """The dtype to run in ("fp32" or "bf16") and why. An explicit request wins; "auto" applies the rule:
    bf16 on CUDA; on a CPU, bf16 only with native bf16 and a target of at least BF16_MIN_PARAMS."""
    if requested not in DTYPE_NAMES:
        raise ModelLoadError(f"dtype {requested!r} is not one of {', '.join(DTYPE_NAMES)}")
    if requested != "auto":
        return requested, f"{requested} requested"
    if device_type == "cuda":
        return "bf16", "CUDA device"
    native, evidence = bf16_native
    if not native:
        return "fp32", f"{evidence}: bf16 would be emulated"
    if target_params is not None and target_params < BF16_MIN_PARAMS:
        return "fp32", f"{evidence}, but a {target_params / 1e6:.0f}M-parameter target is overhead-bound"
    return "bf16", f"{evidence}: native bf16"


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def _load_model(source: ModelSource, role: Role, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    if source.is_local:
        check_model_folder(Path(source.location), role)
    try:
        if source.is_local and _safetensors_files(Path(source.location)):
            model = _load_local_tensor_by_tensor(Path(source.location), dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dtype)
    except OSError as exc:
        if source.is_local:
            raise ModelLoadError(f"cannot load the {role} model from {source.location}: {exc}") from exc
        raise ModelLoadError(
            f"cannot load the {role} model {source.location!r} from the Hugging Face hub (offline, or no "
            f"such model?). Pass a local folder instead. Details: {exc}"
        ) from exc
    except Exception as exc:  # safetensors and config errors come in many types; name the path
        raise ModelLoadError(f"cannot load the {role} model from {source.location}: {exc}") from exc
    model.to(device)  # type: ignore[arg-type]
    model.eval()
    model.requires_grad_(False)
    return model


def _safetensors_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def _load_local_tensor_by_tensor(folder: Path, dtype: torch.dtype) -> PreTrainedModel:
    """A local safetensors checkpoint read tensor by tensor (`pread`), each into memory of its own.

    Why: `from_pretrained` maps the file, and every weight is then a view of one mapping. The lean decoder
    repacks the weights and frees the originals, but the mapping stays while any view lives (the
    embedding table does), so every page of the file stayed resident beside the repacked copy: 1.9x the
    weights. Read apart, each original is freed the moment the lean decoder has repacked it.
    """
    from safetensors import safe_open
    from transformers import AutoConfig, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(folder)
    model_class: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    # safe_open's `pread` backend reads a tensor when transformers first indexes its slice, and not before.
    handles: list[Any] = [
        safe_open(str(file), framework="pt", device="cpu", backend="pread")
        for file in _safetensors_files(folder)
    ]
    slices = {name: handle.get_slice(name) for handle in handles for name in handle.keys()}  # noqa: SIM118
    model: PreTrainedModel = model_class.from_pretrained(None, config=config, state_dict=slices, dtype=dtype)
    model.name_or_path = str(folder)
    if (folder / "generation_config.json").is_file():  # from_pretrained reads it only from a folder it loads
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def _load_tokenizer(source: ModelSource, role: Role) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source.location)
    except Exception as exc:
        raise ModelLoadError(f"cannot load the {role} tokenizer from {source.location}: {exc}") from exc


def check_same_tokenizer(target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase) -> None:
    """Refuse a pair whose vocabularies differ; the message names one differing token."""
    target_vocab: dict[str, int] = target.get_vocab()
    draft_vocab: dict[str, int] = draft.get_vocab()
    if target_vocab == draft_vocab:
        return
    differing = sorted(set(target_vocab.items()) ^ set(draft_vocab.items()), key=lambda item: item[1])
    token, token_id = differing[0]
    raise ModelLoadError(
        "target and draft tokenizers differ, so the draft cannot propose target tokens: "
        f"{len(target_vocab)} vs {len(draft_vocab)} tokens, first difference at id {token_id} ({token!r}). "
        "Pick a draft trained with the target's tokenizer."
    )


def default_draft(target: str | None) -> str | None:
    """The draft used when none is named: the bundled one for the bundled target or a folder; for a catalog
    model its catalog draft when that is pulled (the 0.5B Qwen for the 1.5B one: same tokenizer), else the
    draft distilled for it when one ships (engine/bundled/<bundled_draft>), else none (the copying drafters
    still speculate)."""
    from engine.catalog import CATALOG, is_pulled

    if target not in CATALOG:
        return None
    entry = CATALOG[target]
    if entry.draft_model and is_pulled(entry.draft_model):
        return entry.draft_model
    folder = BUNDLED_DIR / entry.bundled_draft
    shipped = entry.bundled_draft and (folder / "config.json").is_file()
    return str(folder) if shipped else NO_DRAFT


def load_pair(
    target: str | None = None,
    draft: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    num_threads: int | None = None,
) -> ModelPair:
    """Load target, draft (unless "none") and their shared tokenizer onto one device, ready for inference."""
    draft = draft if draft is not None else default_draft(target)
    target_source = resolve_model_path(target, "target")
    draft_source = None if draft == NO_DRAFT else resolve_model_path(draft, "draft")
    resolved_device = pick_device(device)
    params = _target_params(target_source)
    dtype_name, dtype_reason = choose_dtype(dtype, resolved_device.type, params, cpu_bf16_support())
    resolved_dtype = torch_dtype(dtype_name)
    tokenizer = _load_tokenizer(target_source, "target")
    if draft_source is not None:
        check_same_tokenizer(tokenizer, _load_tokenizer(draft_source, "draft"))
    target_model = _load_model(target_source, "target", resolved_device, resolved_dtype)
    draft_model = None
    if draft_source is not None:
        draft_model = _load_model(draft_source, "draft", resolved_device, resolved_dtype)
    if resolved_device.type == "cpu":
        configure_threads(num_threads, target_model.num_parameters())
    return ModelPair(
        target=target_model,
        draft=draft_model,
        tokenizer=tokenizer,
        device=resolved_device,
        dtype=resolved_dtype,
        target_source=target_source,
        draft_source=draft_source,
        dtype_reason=dtype_reason,
    )


def _target_params(source: ModelSource) -> int | None:
    """For the dtype rule; None when unknown (a hub id, unreadable weights: loading then names the problem)."""
    if not source.is_local:
        return None
    try:
        return safetensors_params(Path(source.location))
    except Exception:  # a corrupt header: _load_model reports it with the path
        return None


def safetensors_params(folder: Path) -> int:
    """Parameter count from the safetensors headers, without loading any weight."""
    from safetensors import safe_open

    params = 0
    for weights in sorted(folder.glob("*.safetensors")):
        with safe_open(str(weights), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                count = 1
                for dim in handle.get_slice(name).get_shape():
                    count *= dim
                params += count
    return params


def special_tokens(folder: Path) -> list[str]:
    """The tokenizer's special tokens as saved in its tokenizer.json (no tokenizer is built)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return []
    added = json.loads(path.read_text(encoding="utf-8")).get("added_tokens", [])
    return [
        entry["content"] for entry in added if entry.get("special") and isinstance(entry.get("content"), str)
    ]


def describe_model(source: ModelSource) -> dict[str, Any]:
    """Path, size on disk and parameter count, read from safetensors headers without loading weights."""
    info: dict[str, Any] = {"spec": source.spec, "location": source.location, "local": source.is_local}
    if not source.is_local:
        return info
    folder = Path(source.location)
    info["bytes"] = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    info["params"] = safetensors_params(folder)
    config_path = folder / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        info["model_type"] = config.get("model_type")
        info["context_length"] = config.get("max_position_embeddings") or config.get("n_positions")
        info["stored_dtype"] = config.get("dtype") or config.get("torch_dtype")
    info["special_tokens"] = special_tokens(folder)
    return info


def end_of_text_ids(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel | None = None
) -> frozenset[int]:
    """Ids that end a completion: the tokenizer's EOS, the model's generation EOS ids, a file separator, and
    every other special token (FIM and chat markers): none of them is code, so none may reach a suggestion."""
    from engine.tokens import FILE_SEP

    ids: set[int] = set(tokenizer.all_special_ids)
    ids.update(token_id for token_id, token in tokenizer.added_tokens_decoder.items() if token.special)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list):
        ids.update(int(token) for token in eos)
    vocab = tokenizer.get_vocab()
    if FILE_SEP in vocab:
        ids.add(vocab[FILE_SEP])
    return frozenset(ids)
