"""`specls doctor`'s checks of the model pair: each model's folder and size, the shared tokenizer and its FIM
tokens, and the precision and runtime the server would pick. None of them loads a model's weights."""

from __future__ import annotations

from pathlib import Path

from lsp_server.app.commands.doctor_environment import Check


def check_model_choice(target: str | None, draft: str | None, device: str) -> tuple[str | None, list[Check]]:
    """The target the server would load with these flags, and why: the named one, or the default rule's
    choice for this machine and what is pulled (`lsp_server.backends.local_target_choice`, as `serve` does)."""
    from lsp_server.backends import local_target_choice
    from lsp_server.config import ServerSettings

    chosen, reason = local_target_choice(ServerSettings(target=target, draft=draft, device=device))
    return chosen, [Check("model", "ok", f"{chosen or 'the bundled pair'}: {reason}")]


def check_model_pair(target: str | None, draft: str | None) -> list[Check]:
    """Each model's folder and size, then whether the two speak the same tokens and carry FIM tokens."""
    from engine.models import (
        NO_DRAFT,
        ModelLoadError,
        Role,
        check_model_folder,
        default_draft,
        describe_model,
        resolve_model_path,
    )

    checks: list[Check] = []
    sources = {}
    roles: tuple[Role, ...] = ("target", "draft")
    draft = draft if draft is not None else default_draft(target)
    for role, spec in zip(roles, (target, draft), strict=True):
        if role == "draft" and spec == NO_DRAFT:
            checks.append(Check("draft model", "ok", "none: lookup, suffix and stale drafting only"))
            continue
        try:
            source = resolve_model_path(spec, role)
            if source.is_local:
                check_model_folder(Path(source.location), role)
                info = describe_model(source)
                detail = (
                    f"{source.location}: {info.get('model_type')}, {info.get('params', 0):,} params, "
                    f"{info.get('bytes', 0) / 1e6:.1f} MB, context {info.get('context_length')}"
                )
            else:
                detail = f"hub id {source.location!r} (downloaded on first use; needs the network once)"
        except ModelLoadError as exc:
            checks.append(Check(f"{role} model", "fail", str(exc), _model_fix(role, spec)))
            continue
        except Exception as exc:  # a corrupt safetensors header, an unreadable folder
            checks.append(
                Check(f"{role} model", "fail", f"{type(exc).__name__}: {exc}", _model_fix(role, spec))
            )
            continue
        sources[role] = source
        checks.append(Check(f"{role} model", "ok", detail))
    if len(sources) == 2 and all(source.is_local for source in sources.values()):
        checks.extend(check_tokenizers(sources["target"].location, sources["draft"].location))
    elif draft == NO_DRAFT and "target" in sources and sources["target"].is_local:
        from engine.models import special_tokens

        checks.append(check_fim(tuple(special_tokens(Path(sources["target"].location)))))
    elif len(sources) < 2:
        checks.append(Check("tokenizers", "skip", "needs both models"))
    return checks


def _model_fix(role: str, spec: str | None) -> str:
    if spec in (None, "bundled"):
        return (
            f"train the bundled pair with `specls train` (it writes engine/bundled/{role}), "
            f"or point --{role} at a Hugging Face model folder"
        )
    return f"pass --{role} a folder that holds config.json, model.safetensors and the tokenizer files"


def check_tokenizers(target_dir: str, draft_dir: str) -> list[Check]:
    import json

    from transformers import AutoTokenizer

    from engine.models import ModelLoadError, check_same_tokenizer

    try:
        target = AutoTokenizer.from_pretrained(target_dir)
        draft = AutoTokenizer.from_pretrained(draft_dir)
    except Exception as exc:
        return [
            Check("tokenizers", "fail", f"cannot load: {exc}", "copy the tokenizer files next to the weights")
        ]
    try:
        check_same_tokenizer(target, draft)
    except ModelLoadError as exc:
        return [Check("tokenizers", "fail", str(exc), "use a draft from the target's model family")]
    checks = [
        Check(
            "tokenizers", "ok", f"target and draft share one vocabulary of {len(target.get_vocab()):,} tokens"
        )
    ]
    sizes = [
        json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
        for folder in (target_dir, draft_dir)
    ]
    if sizes[0] != sizes[1]:
        checks.append(
            Check(
                "vocab size",
                "warn",
                f"target outputs {sizes[0]} logits, draft {sizes[1]}; only the shared ids can be proposed",
            )
        )
    checks.append(check_fim(tuple(target.all_special_tokens)))
    return checks


def check_fim(special_tokens: tuple[str, ...]) -> Check:
    from lsp_server.context.fim import detect_fim_template

    template = detect_fim_template(special_tokens)
    if template is None:
        return Check(
            "fill-in-the-middle",
            "warn",
            "the tokenizer has no FIM tokens: prompts are prefix-only; the text after the cursor still "
            "drives the stop rules",
            "for fill-in-the-middle use a code model trained with FIM (the bundled pair, Qwen2.5-Coder, ...)",
        )
    return Check("fill-in-the-middle", "ok", f"{template.name} template")


def check_dtype(target: str | None, device: str, requested: str) -> list[Check]:
    """The precision the server would run in, and the evidence for it (CPU flags, model size)."""
    from engine.hardware import choose_target_quantization
    from engine.models import (
        choose_dtype,
        cpu_bf16_support,
        pick_device,
        resolve_model_path,
        safetensors_params,
    )

    source = resolve_model_path(target, "target")
    params = safetensors_params(Path(source.location)) if source.is_local else None
    device_type = pick_device(device).type
    name, reason = choose_dtype(requested, device_type, params, cpu_bf16_support())
    quantization, _ = choose_target_quantization("auto", device_type, name, params)
    lossless = "greedy speculative output is token-identical to plain decoding"
    if name == "bf16" or quantization != "none":
        lossless = (
            f"{name if quantization == 'none' else quantization}: greedy speculative output may differ from "
            "plain decoding only at near-ties (--dtype fp32 --quantize none: never)"
        )
    checks = [Check("dtype", "ok", f"{name} ({reason}); {lossless}")]
    if params:
        weights_mb = params * (2 if name == "bf16" else 4) / 2**20
        # Measured (docs/performance.md): the loaded server holds 1.1-1.3x its weights, tokenizer included.
        checks.append(
            Check(
                "memory",
                "ok",
                f"the target's {name} weights take {weights_mb:,.0f} MB; loaded, the server holds about "
                f"{1.1 * weights_mb:,.0f}-{1.3 * weights_mb:,.0f} MB for them (`specls/stats` reports it)",
            )
        )
    return checks


def check_runtime(target: str | None, device: str) -> list[Check]:
    """What would decode the target (llama.cpp in process, or torch) and why; never loads the model."""
    from engine.hardware import choose_target_quantization, cpu_class
    from engine.llama_cpp_decoder import find_gguf, llama_cpp_available
    from engine.models import (
        choose_dtype,
        cpu_bf16_support,
        pick_device,
        resolve_model_path,
        safetensors_params,
    )
    from engine.runtime import choose_draft_quantization, choose_runtime, llama_cpp_blocker

    source = resolve_model_path(target, "target")
    device_type = pick_device(device).type
    params = safetensors_params(Path(source.location)) if source.is_local else None
    dtype, _ = choose_dtype("auto", device_type, params, cpu_bf16_support())
    projections, projections_reason = choose_target_quantization("auto", device_type, dtype, params)
    gguf = find_gguf(Path(source.location)) if source.is_local else None
    blocker = llama_cpp_blocker(pick_device(device).type, gguf, llama_cpp_available())
    runtime, reason = choose_runtime("auto", "none", blocker)
    draft_quantization, draft_reason = choose_draft_quantization("auto", pick_device(device).type)
    # A draft's weights never change the output, only how many of its drafts are accepted.
    draft = Check("draft weights", "ok", f"{draft_quantization} ({draft_reason}), when a draft model runs")
    if runtime == "llama.cpp" and gguf is not None:
        detail = (
            f"llama.cpp in process over {gguf.name} ({reason}); greedy speculative output may differ from "
        )
        detail += "plain decoding only at near-ties"
        return [Check("runtime", "ok", detail), draft]
    engine = f"torch ({reason}) on {device_type}"
    if device_type == "cpu":
        engine += f", CPU class {cpu_class()}"
    engine += f"; projections {projections} ({projections_reason})"
    return [Check("runtime", "ok", engine), draft]
