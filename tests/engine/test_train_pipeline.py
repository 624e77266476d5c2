"""The training pipeline end to end at micro size: loss falls, runs are deterministic and resumable,
and the saved pair loads through the normal loader and generates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from engine.train import pipeline
from engine.train.corpus import is_held_out, iter_source_files, split_corpus, stdlib_root
from engine.train.pipeline import PRESETS, ModelShape, run_training

MICRO = dataclasses.replace(
    PRESETS["tiny"],
    name="micro",
    vocab_size=320,
    seq_len=64,
    target=ModelShape(layers=1, hidden=32, heads=2, ffn=64),
    draft=ModelShape(layers=1, hidden=16, heads=2, ffn=32),
    batch_size=4,
    target_steps=24,
    target_lr=1e-2,
    distill_batches=3,
    distill_epochs=2,
    checkpoint_every=4,
    max_files=None,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for source in sorted((stdlib_root() / "json").glob("*.py")):
        (root / source.name).write_bytes(source.read_bytes())
    (root / "latin1.py").write_bytes(b"# caf\xe9 in Latin-1, not UTF-8\nx = 1\n")
    return root


def train(corpus: Path, out: Path, preset: pipeline.TrainPreset = MICRO) -> pipeline.TrainResult:
    torch.set_num_threads(1)
    return run_training(
        preset, out / "pair", out / "work", (corpus,), seed=3, progress=False, include_stdlib=False
    )


@pytest.fixture(scope="module")
def trained(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> pipeline.TrainResult:
    return train(corpus, tmp_path_factory.mktemp("run"))


def test_loss_falls_and_pair_is_saved_in_hf_format(trained: pipeline.TrainResult) -> None:
    losses = trained.target_log.losses
    assert len(losses) == MICRO.target_steps
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.5
    draft_losses = trained.draft_log.losses
    assert sum(draft_losses[-3:]) / 3 < sum(draft_losses[:3]) / 3
    for folder in (trained.target_dir, trained.draft_dir):
        names = {p.name for p in folder.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
        assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"


def test_saved_pair_loads_through_the_normal_loader_and_generates(trained: pipeline.TrainResult) -> None:
    from engine.api import CompletionRequest
    from engine.service import LocalEngine

    engine = LocalEngine(target=str(trained.target_dir), draft=str(trained.draft_dir), device="cpu")
    prompt = "def decode(self, s):\n    "
    speculative = engine.complete(CompletionRequest(prompt=prompt, max_new_tokens=12, drafter="hybrid"))
    plain = engine.complete(CompletionRequest(prompt=prompt, max_new_tokens=12, drafter="none"))
    assert speculative.token_ids == plain.token_ids
    assert len(plain.token_ids) > 0


def test_same_seed_gives_the_same_run_and_a_killed_run_resumes(
    corpus: Path, trained: pipeline.TrainResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_batch = pipeline.SequenceSampler.batch

    def dies_at_step_10(
        self: pipeline.SequenceSampler, seed: int, step: int, batch_size: int
    ) -> torch.Tensor:
        if step == 10:
            raise KeyboardInterrupt("simulated kill")
        return real_batch(self, seed, step, batch_size)

    monkeypatch.setattr(pipeline.SequenceSampler, "batch", dies_at_step_10)
    with pytest.raises(KeyboardInterrupt):
        train(corpus, tmp_path)
    monkeypatch.setattr(pipeline.SequenceSampler, "batch", real_batch)
    resumed = train(corpus, tmp_path)  # picks up from the step-8 checkpoint
    assert resumed.target_log.losses == trained.target_log.losses
    assert resumed.draft_log.losses == trained.draft_log.losses


def test_held_out_rule_is_a_stable_path_hash() -> None:
    files = iter_source_files([stdlib_root() / "email"])
    train_files, held_out = split_corpus(files)
    assert held_out and train_files
    assert all(is_held_out(f.path) for f in held_out)
    assert not any(is_held_out(f.path) for f in train_files)
    assert is_held_out("copy.py") and not is_held_out("json/decoder.py")


def test_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="corpus is empty"):
        train(tmp_path / "empty", tmp_path)


def test_evaluation_and_model_card(trained: pipeline.TrainResult, corpus: Path, tmp_path: Path) -> None:
    from engine.train.card import evaluate_pair, write_model_card

    train_files, held_out = split_corpus(iter_source_files([corpus]))
    result = dataclasses.replace(trained, held_out=held_out or train_files[:2])
    metrics = evaluate_pair(result, MICRO, train_files, progress=False)
    assert metrics["target_params"] > metrics["draft_params"] > 0
    assert 0.0 <= metrics["greedy_agreement_alpha"] <= 1.0
    assert 0.0 <= metrics["fim_line_exact_match"] <= 1.0 and metrics["fim_cases"] > 0
    assert metrics["held_out_ce_target"] > 0 and metrics["held_out_ce_trigram"] > 0
    assert metrics["draft_step_over_target_step"] > 0
    assert list(metrics["verify_cost_in_target_steps"]) == [1, 2, 4, 8, 16]  # what fits a 64-token window
    card = write_model_card(tmp_path, metrics, MICRO, "specls train --preset micro --seed 3")
    text = card.read_text()
    assert "specls train --preset micro --seed 3" in text
    assert f"| draft-target greedy token agreement (alpha) | {metrics['greedy_agreement_alpha']} |" in text
    assert json.loads((tmp_path / "metrics.json").read_text())["fim_cases"] == metrics["fim_cases"]
