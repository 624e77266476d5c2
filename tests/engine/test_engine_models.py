"""Loading a pair from folders: the happy path and every bad input with its message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from engine_core_support import CODE, save_pair, tiny_gpt2, tiny_llama, tokenizer
from transformers import PreTrainedTokenizerFast

from engine import models
from engine.api import CompletionRequest
from engine.models import ModelLoadError, describe_model, load_pair, resolve_model_path
from engine.service import LocalEngine
from engine.train.tokenizer import train_code_tokenizer


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pair")
    save_pair(folder, tiny_llama(seed=1), tiny_llama(seed=2, layers=1, tied=True), tokenizer())
    return folder


def test_load_pair_from_folders_and_complete(pair_dir: Path) -> None:
    pair = load_pair(str(pair_dir / "target"), str(pair_dir / "draft"), device="cpu", num_threads=1)
    assert pair.dtype == torch.float32 and pair.device.type == "cpu"
    engine = LocalEngine(pair=pair)
    info = engine.info()
    assert info.name == "local" and "<|sp_fim_middle|>" in info.special_tokens
    # what `specls/stats` reports as the models' memory: both decoders' weights and caches
    weights = info.memory["weights_mb"]
    assert weights is not None and weights > 0 and info.memory["kv_cache_mb"]
    result = engine.complete(CompletionRequest(prompt="def add(a, b):", max_new_tokens=8))
    assert result.stats.target_forwards >= 1 and result.finish_reason in ("length", "eos")


def test_a_local_checkpoint_loads_into_weights_of_their_own_equal_to_from_pretrained(pair_dir: Path) -> None:
    """Each weight owns its memory (no view of one mapped file), so the lean decoder frees each original once
    it has repacked it; a tied output table stays the input table; the values are from_pretrained's."""
    from transformers import AutoModelForCausalLM

    pair = load_pair(str(pair_dir / "target"), str(pair_dir / "draft"), device="cpu", num_threads=1)
    for model, folder in ((pair.target, pair_dir / "target"), (pair.draft, pair_dir / "draft")):
        assert model is not None and model.name_or_path == str(folder)
        weights = list(model.parameters())  # a tied table is listed once
        assert len({w.untyped_storage().data_ptr() for w in weights}) == len(weights)
        reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        loaded, expected = model.state_dict(), reference.state_dict()
        assert loaded.keys() == expected.keys()
        assert all(torch.equal(loaded[name], expected[name]) for name in expected)
        assert model.generation_config.to_dict() == reference.generation_config.to_dict()
    assert pair.draft is not None
    assert pair.draft.get_output_embeddings().weight is pair.draft.get_input_embeddings().weight


def test_describe_model_counts_parameters_without_loading(pair_dir: Path) -> None:
    described = describe_model(resolve_model_path(str(pair_dir / "target")))
    expected = sum(p.numel() for p in tiny_llama(seed=1).state_dict().values())
    assert described["params"] == expected
    assert described["bytes"] > 4 * expected
    assert described["model_type"] == "llama"


def test_mismatched_tokenizers_are_refused(pair_dir: Path, tmp_path: Path) -> None:
    other = train_code_tokenizer([text[::-1] for text in CODE] * 20, vocab_size=380)
    other_fast = PreTrainedTokenizerFast(tokenizer_object=other, eos_token="<|endoftext|>")
    tiny_gpt2().save_pretrained(tmp_path / "draft")
    other_fast.save_pretrained(tmp_path / "draft")
    with pytest.raises(ModelLoadError, match="tokenizers differ"):
        load_pair(str(pair_dir / "target"), str(tmp_path / "draft"), device="cpu")


def test_missing_and_broken_folders_get_clear_errors(pair_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_pair(str(tmp_path / "nowhere"), str(pair_dir / "draft"), device="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        models.check_model_folder(empty, "target")
    (empty / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        models.check_model_folder(empty, "target")
    (empty / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelLoadError, match="no model.safetensors"):
        models.check_model_folder(empty, "target")
    # Truncated weights: the error names the folder instead of a bare safetensors message.
    broken = tmp_path / "broken"
    tiny_llama(seed=1).save_pretrained(broken)
    tokenizer().save_pretrained(broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(ModelLoadError, match="broken"):
        load_pair(str(broken), str(pair_dir / "draft"), device="cpu")


def test_resolve_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "BUNDLED_DIR", tmp_path / "bundled")
    with pytest.raises(ModelLoadError, match="specls train"):
        resolve_model_path(None, "draft")
    (tmp_path / "bundled" / "draft").mkdir(parents=True)
    (tmp_path / "bundled" / "draft" / "config.json").write_text("{}")
    assert resolve_model_path("bundled", "draft").location == str(tmp_path / "bundled" / "draft")
    hub = resolve_model_path("someorg/some-model")
    assert (hub.is_local, hub.location) == (False, "someorg/some-model")
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model_path("./missing-model")


def test_small_models_decode_on_one_thread_unless_told_otherwise(pair_dir: Path) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        load_pair(str(pair_dir / "target"), str(pair_dir / "draft"), device="cpu")
        assert torch.get_num_threads() == 1  # a tiny target: a second thread only adds sync cost
        load_pair(str(pair_dir / "target"), str(pair_dir / "draft"), device="cpu", num_threads=2)
        assert torch.get_num_threads() == 2
        torch.set_num_threads(2)
        large = models.configure_threads(None, target_params=models.SINGLE_THREAD_BELOW_PARAMS)
        assert large == min(2, os.cpu_count() or 1)  # big models keep torch's threads
    finally:
        torch.set_num_threads(before)
