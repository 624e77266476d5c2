"""GGUF export: the RoPE permutation is exact, the file holds what llama.cpp needs, bad input is refused.
(llama.cpp itself loading and running the file is tested in tests/e2e/test_remote_llama_server.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.gguf_export import GgufExportError, export_llama_gguf, gguf_vocab, permute_for_gguf_rope
from engine.tokens import SPECIAL_TOKENS
from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

CODE = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n\tprint(i, 'ü')\n",
] * 20


def rope_angles(positions: np.ndarray, head_dim: int, theta: float = 10000.0) -> np.ndarray:
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    return positions[:, None] * inv_freq[None, :]  # (seq, head_dim/2)


def rope_hf(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Hugging Face Llama: dimension i pairs with i + head_dim/2 (rotate_half)."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(angles), np.sin(angles)
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def rope_interleaved(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """llama.cpp's LLAMA graph: adjacent dimensions (2i, 2i+1) form a pair."""
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def test_permutation_turns_rotate_half_rope_into_interleaved_rope() -> None:
    rng = np.random.default_rng(0)
    n_heads, head_dim, hidden, seq = 4, 16, 64, 7
    w_q = rng.standard_normal((n_heads * head_dim, hidden))
    w_k = rng.standard_normal((n_heads * head_dim, hidden))
    x = rng.standard_normal((seq, hidden))
    angles = rope_angles(np.arange(seq, dtype=np.float64), head_dim)

    def scores(wq: np.ndarray, wk: np.ndarray, rope: object) -> np.ndarray:
        q = (x @ wq.T).reshape(seq, n_heads, head_dim).transpose(1, 0, 2)
        k = (x @ wk.T).reshape(seq, n_heads, head_dim).transpose(1, 0, 2)
        q, k = rope(q, angles), rope(k, angles)  # type: ignore[operator]
        return q @ k.transpose(0, 2, 1)

    hf = scores(w_q, w_k, rope_hf)
    gguf = scores(permute_for_gguf_rope(w_q, n_heads), permute_for_gguf_rope(w_k, n_heads), rope_interleaved)
    np.testing.assert_allclose(gguf, hf, rtol=1e-10, atol=1e-10)
    # and it is a real reordering, not the identity
    assert not np.allclose(permute_for_gguf_rope(w_q, n_heads), w_q)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = train_code_tokenizer(CODE, vocab_size=300)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(128)))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=320,  # more rows than tokens: the export pads the vocabulary
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_export_writes_llama_metadata_tokenizer_and_tensors(tiny_model: Path, tmp_path: Path) -> None:
    import gguf
    from tokenizers import Tokenizer

    result = export_llama_gguf(tiny_model, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(result.path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    assert fields["general.architecture"] == "llama"
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert fields["llama.block_count"] == 2 and fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.context_length"] == 128 and fields["tokenizer.ggml.add_bos_token"] is False

    hf = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == 320
    assert all(tokens[i] == hf.id_to_token(i) for i in range(hf.get_vocab_size()))
    assert tokens[-1] == "[PAD319]"
    types = fields["tokenizer.ggml.token_type"]
    special_ids = [hf.token_to_id(token) for token in SPECIAL_TOKENS]
    assert [types[i] for i in special_ids] == [int(gguf.TokenType.CONTROL)] * len(SPECIAL_TOKENS)
    assert types[hf.token_to_id("def")] == int(gguf.TokenType.NORMAL)
    assert types[-1] == int(gguf.TokenType.UNUSED)
    assert fields["tokenizer.ggml.eos_token_id"] == hf.token_to_id("<|endoftext|>")
    assert fields["tokenizer.ggml.fim_pre_token_id"] == hf.token_to_id("<|sp_fim_prefix|>")

    names = {tensor.name for tensor in reader.tensors}
    assert len(names) == result.tensors == 2 * 9 + 3
    assert {"token_embd.weight", "output.weight", "blk.1.attn_k.weight", "blk.1.ffn_down.weight"} <= names
    k = next(t for t in reader.tensors if t.name == "blk.0.attn_k.weight")
    assert list(k.shape) == [32, 16]  # ggml order: (in, out) for a (2 kv heads x 8, 32) matrix


def test_f16_export_keeps_norms_in_f32(tiny_model: Path, tmp_path: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(export_llama_gguf(tiny_model, tmp_path / "tiny16.gguf", dtype="f16").path)
    kinds = {tensor.name: tensor.tensor_type for tensor in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert kinds["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_tokenizers_llama_cpp_cannot_reproduce_are_refused(tiny_model: Path) -> None:
    tokenizer_json = json.loads((tiny_model / "tokenizer.json").read_text())
    prefix_space = json.loads(json.dumps(tokenizer_json))
    prefix_space["pre_tokenizer"]["add_prefix_space"] = True
    with pytest.raises(GgufExportError, match="gpt-2"):
        gguf_vocab(prefix_space, 320)
    normalized = dict(tokenizer_json, normalizer={"type": "NFC"})
    with pytest.raises(GgufExportError, match="normalizer"):
        gguf_vocab(normalized, 320)
    with pytest.raises(GgufExportError, match="embedding rows"):
        gguf_vocab(tokenizer_json, 100)


def test_export_command_reports_a_missing_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lsp_server.app.cli import main

    assert (
        main(["export", "gguf", "--out", str(tmp_path / "out"), "--target", str(tmp_path), "--no-draft"]) == 2
    )
    assert "lacks config.json" in capsys.readouterr().err
