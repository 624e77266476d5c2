"""Write a Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json) as one GGUF file
that llama.cpp (`llama-server`) loads.

Why not llama.cpp's own converter: it identifies a BPE pre-tokenizer by hashing the tokenization of a
fixed test string and refuses tokenizers it has not seen, and ours is new. It is, however, exactly
GPT-2's byte-level BPE: the GPT-2 regex split, the GPT-2 byte-to-unicode alphabet, no prefix space,
no normalizer. llama.cpp implements that split as pre-tokenizer "gpt-2", so `gguf_vocab` checks
those properties and writes `tokenizer.ggml.pre = "gpt-2"` explicitly (see docs/remote.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

GgufDtype = Literal["f32", "f16"]

# llama.cpp's name for the GPT-2 regex split (src/llama-vocab.cpp maps it to LLAMA_VOCAB_PRE_TYPE_GPT2).
GPT2_PRE_TOKENIZER = "gpt-2"

# Special-token strings that llama.cpp should know as fill-in-the-middle tokens (it then also serves /infill).
_FIM_ROLES = {
    "<|sp_fim_prefix|>": "fim_pre",
    "<|sp_fim_suffix|>": "fim_suf",
    "<|sp_fim_middle|>": "fim_mid",
}


class GgufExportError(ValueError):
    """The model or tokenizer uses something this exporter cannot express in GGUF faithfully."""


@dataclass(frozen=True)
class GgufVocab:
    tokens: list[str]  # in id order, as byte-level BPE strings (GPT-2's byte-to-unicode alphabet)
    token_types: list[int]  # gguf.TokenType values
    merges: list[str]  # "left right", highest priority first
    special_ids: dict[str, int]  # "bos", "eos", "pad", "fim_pre", "fim_suf", "fim_mid" -> id


@dataclass(frozen=True)
class GgufExportResult:
    path: Path
    tensors: int
    vocab_size: int
    parameters: int


def _is_gpt2_byte_level(pre_tokenizer: dict[str, Any] | None) -> bool:
    """True for ByteLevel(add_prefix_space=False, use_regex=True), alone or as the only step of a Sequence."""
    if pre_tokenizer is None:
        return False
    if pre_tokenizer.get("type") == "Sequence":
        steps = pre_tokenizer.get("pretokenizers", [])
        return len(steps) == 1 and _is_gpt2_byte_level(steps[0])
    return (
        pre_tokenizer.get("type") == "ByteLevel"
        and pre_tokenizer.get("use_regex", True) is True
        and pre_tokenizer.get("add_prefix_space", False) is False
    )


def gguf_vocab(tokenizer_json: dict[str, Any], vocab_size: int) -> GgufVocab:
    """Map a `tokenizers` byte-level BPE (tokenizer.json) to GGUF's "gpt2" tokenizer model.

    `vocab_size` is the model's embedding rows; ids past the tokenizer's vocabulary become unused padding
    tokens so the two agree, as llama.cpp requires.
    """
    import gguf  # the GGUF writer library; imported here so `engine` imports stay light

    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE":
        raise GgufExportError(f"tokenizer model is {model.get('type')!r}; only byte-level BPE is supported")
    if tokenizer_json.get("normalizer") is not None:
        raise GgufExportError("tokenizer has a normalizer; llama.cpp's gpt-2 pre-tokenizer applies none")
    if not _is_gpt2_byte_level(tokenizer_json.get("pre_tokenizer")):
        raise GgufExportError(
            "tokenizer pre-tokenizer is not ByteLevel(use_regex=True, add_prefix_space=False), "
            "so it cannot be mapped to llama.cpp's 'gpt-2' pre-tokenizer"
        )
    decoder = tokenizer_json.get("decoder") or {}
    if decoder.get("type") != "ByteLevel":
        raise GgufExportError(f"tokenizer decoder is {decoder.get('type')!r}; expected ByteLevel")

    id_to_token: dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
    special: dict[int, str] = {}
    for added in tokenizer_json.get("added_tokens", []):
        id_to_token[int(added["id"])] = added["content"]
        if added.get("special", False):
            special[int(added["id"])] = added["content"]
    if max(id_to_token) >= vocab_size:
        raise GgufExportError(
            f"tokenizer has id {max(id_to_token)} but the model has only {vocab_size} embedding rows"
        )

    tokens: list[str] = []
    token_types: list[int] = []
    for token_id in range(vocab_size):
        if token_id in special:
            tokens.append(special[token_id])
            token_types.append(int(gguf.TokenType.CONTROL))  # matched whole in prompts, never printed
        elif token_id in id_to_token:
            tokens.append(id_to_token[token_id])
            token_types.append(int(gguf.TokenType.NORMAL))
        else:
            tokens.append(f"[PAD{token_id}]")
            token_types.append(int(gguf.TokenType.UNUSED))

    # tokenizers >= 0.20 stores merges as [left, right] pairs, older versions as "left right" strings.
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in model.get("merges", [])]

    by_content = {content: token_id for token_id, content in special.items()}
    special_ids: dict[str, int] = {}
    if "<|endoftext|>" in by_content:
        for role in ("bos", "eos", "pad"):
            special_ids[role] = by_content["<|endoftext|>"]
    for content, role in _FIM_ROLES.items():
        if content in by_content:
            special_ids[role] = by_content[content]
    return GgufVocab(tokens=tokens, token_types=token_types, merges=merges, special_ids=special_ids)


def permute_for_gguf_rope(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k projection rows from Hugging Face's rotate-half RoPE layout to llama.cpp's.

    HF rotates dimension i of a head with dimension i + head_dim/2; llama.cpp's LLAMA graph rotates
    adjacent pairs (2i, 2i+1). Interleaving the two halves of each head's rows makes both compute the
    same attention scores.
    """
    rows = weight.shape[0]
    head_dim = rows // n_heads
    return weight.reshape(n_heads, 2, head_dim // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _rope_theta(config: dict[str, Any]) -> float:
    # transformers 5 nests RoPE settings under "rope_parameters"; 4.x kept "rope_theta" at top level.
    params = config.get("rope_parameters") or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default" or config.get("rope_scaling"):
        raise GgufExportError(f"RoPE scaling ({rope_type!r}) is not supported by this exporter")
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def _check_llama_config(config: dict[str, Any]) -> None:
    if config.get("model_type") != "llama":
        raise GgufExportError(f"model_type is {config.get('model_type')!r}; only 'llama' is supported")
    if config.get("hidden_act", "silu") != "silu":
        raise GgufExportError(f"hidden_act {config.get('hidden_act')!r} is not supported (llama uses silu)")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise GgufExportError("attention or MLP biases are not supported by the llama GGUF layout")


def _load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    import torch
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise GgufExportError(f"no .safetensors weights in {model_dir}")
    weights: dict[str, np.ndarray] = {}
    for file in files:
        for name, tensor in load_file(str(file)).items():
            weights[name.removeprefix("model.")] = tensor.to(torch.float32).numpy()
    return weights


def _gguf_tensors(weights: dict[str, np.ndarray], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """HF Llama weight names -> GGUF tensor names (llama.cpp's LLAMA layout), q/k permuted for RoPE."""
    n_heads = int(config["num_attention_heads"])
    n_kv_heads = int(config.get("num_key_value_heads") or n_heads)
    out: list[tuple[str, np.ndarray]] = [("token_embd.weight", weights.pop("embed_tokens.weight"))]
    for layer in range(int(config["num_hidden_layers"])):
        hf, gg = f"layers.{layer}.", f"blk.{layer}."
        out += [
            (gg + "attn_norm.weight", weights.pop(hf + "input_layernorm.weight")),
            (
                gg + "attn_q.weight",
                permute_for_gguf_rope(weights.pop(hf + "self_attn.q_proj.weight"), n_heads),
            ),
            (
                gg + "attn_k.weight",
                permute_for_gguf_rope(weights.pop(hf + "self_attn.k_proj.weight"), n_kv_heads),
            ),
            (gg + "attn_v.weight", weights.pop(hf + "self_attn.v_proj.weight")),
            (gg + "attn_output.weight", weights.pop(hf + "self_attn.o_proj.weight")),
            (gg + "ffn_norm.weight", weights.pop(hf + "post_attention_layernorm.weight")),
            (gg + "ffn_gate.weight", weights.pop(hf + "mlp.gate_proj.weight")),
            (gg + "ffn_up.weight", weights.pop(hf + "mlp.up_proj.weight")),
            (gg + "ffn_down.weight", weights.pop(hf + "mlp.down_proj.weight")),
        ]
    out.append(("output_norm.weight", weights.pop("norm.weight")))
    # A tied model stores no lm_head; llama.cpp then reuses token_embd as the output matrix.
    lm_head = weights.pop("lm_head.weight", None)
    if not config.get("tie_word_embeddings", False):
        if lm_head is None:
            raise GgufExportError("the model is not tied but has no lm_head.weight")
        out.append(("output.weight", lm_head))
    leftovers = sorted(name for name in weights if "rotary_emb" not in name)
    if leftovers:
        raise GgufExportError(f"weights not understood by the llama layout: {', '.join(leftovers[:5])}")
    return out


def export_llama_gguf(
    model_dir: Path, out_path: Path, *, name: str | None = None, dtype: GgufDtype = "f32"
) -> GgufExportResult:
    """Write `model_dir` (a Hugging Face LlamaForCausalLM folder) as a GGUF file at `out_path`.

    f32 keeps llama.cpp's greedy output as close as possible to the PyTorch engine's; f16 halves the
    file. Norm weights always stay f32, as llama.cpp expects.
    """
    import gguf

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    _check_llama_config(config)
    tokenizer_json = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab_size = int(config["vocab_size"])
    vocab = gguf_vocab(tokenizer_json, vocab_size)
    tensors = _gguf_tensors(_load_weights(model_dir), config)

    n_heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // n_heads)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = out_path.with_name(out_path.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp_path), "llama")
    writer.add_name(name or model_dir.name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(vocab_size)
    writer.add_context_length(int(config.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or n_heads))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))

    writer.add_tokenizer_model("gpt2")  # GGUF's name for byte-level BPE
    writer.add_tokenizer_pre(GPT2_PRE_TOKENIZER)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    setters = {
        "bos": writer.add_bos_token_id,
        "eos": writer.add_eos_token_id,
        "pad": writer.add_pad_token_id,
    }
    for role, token_id in vocab.special_ids.items():
        if role in setters:
            setters[role](token_id)
        else:
            writer.add_uint32(f"tokenizer.ggml.{role}_token_id", token_id)
    # FIM prompts carry their own markers; a BOS would shift every position against the PyTorch engine.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)

    parameters = 0
    for tensor_name, array in tensors:
        parameters += array.size
        keep_f32 = dtype == "f32" or array.ndim == 1
        writer.add_tensor(tensor_name, array.astype(np.float32 if keep_f32 else np.float16))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp_path.replace(out_path)  # a reader never sees a half-written model
    return GgufExportResult(path=out_path, tensors=len(tensors), vocab_size=vocab_size, parameters=parameters)
