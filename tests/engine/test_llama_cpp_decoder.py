"""The in-process llama.cpp runtime: a `CausalDecoder` over the bundled target exported to GGUF (f32).

Checks the decoder contract (a batch returns logits for every position, equal to single steps and to the
torch model; crop forgets positions; bad input raises and leaves the cache as it was), then the loop on top:
greedy speculative output leaves plain output only at near-ties, and a `LocalEngine` picks llama.cpp by
default when it is installed and a GGUF lies beside the target. Skipped where llama-cpp-python is not
installed (`bash scripts/setup.sh --llama-cpp`; the dev set-up installs it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from engine_core_support import FixedLength, ScriptedDrafter

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh --llama-cpp)"
)

from engine.autoregressive import autoregressive_generate  # noqa: E402
from engine.generation import DecodeSettings  # noqa: E402
from engine.gguf_export import export_llama_gguf  # noqa: E402
from engine.lean import LeanLlamaDecoder  # noqa: E402
from engine.llama_cpp_decoder import LlamaCppDecoder, find_gguf  # noqa: E402
from engine.precision import NEAR_TIE_MARGIN, MarginRecorder, greedy_divergence  # noqa: E402
from engine.speculative import speculative_generate  # noqa: E402

BUNDLED_TARGET = Path(__file__).resolve().parents[2] / "engine" / "bundled" / "target"
WINDOW = 256


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the bundled target with its f32 GGUF beside the weights, as `specls pull` lays models out."""
    folder = tmp_path_factory.mktemp("llama-cpp") / "target"
    shutil.copytree(BUNDLED_TARGET, folder)
    export_llama_gguf(folder, folder / "target.gguf")
    return folder


@pytest.fixture(scope="module")
def decoder(model_dir: Path) -> LlamaCppDecoder:
    gguf = find_gguf(model_dir)
    assert gguf is not None
    return LlamaCppDecoder(gguf, WINDOW, threads=1)


@pytest.fixture(scope="module")
def prompt(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n"
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_batch_logits_equal_single_steps_and_the_torch_model(
    decoder: LlamaCppDecoder, prompt: list[int]
) -> None:
    from transformers import AutoModelForCausalLM

    decoder.crop(0)
    batch = decoder.forward(prompt)
    assert batch.shape == (len(prompt), decoder.vocab_size) and batch.dtype == torch.float32
    decoder.crop(5)
    assert decoder.cached_tokens == prompt[:5]
    steps = torch.cat([decoder.forward([token]) for token in prompt[5:]])
    assert (steps - batch[5:]).abs().max().item() < 1e-3
    model = AutoModelForCausalLM.from_pretrained(BUNDLED_TARGET, dtype=torch.float32).eval()
    reference = LeanLlamaDecoder(model, WINDOW).forward(prompt)  # type: ignore[arg-type]
    assert (batch - reference).abs().max().item() < 2e-2 * reference.abs().max().item()
    assert torch.equal(batch.argmax(-1), reference.argmax(-1))


def test_crop_forgets_rejected_positions(decoder: LlamaCppDecoder, prompt: list[int]) -> None:
    decoder.crop(0)
    decoder.forward(prompt[:10])
    first = decoder.forward(prompt[10:14])
    decoder.crop(10)
    decoder.forward([7, 8, 9, 10, 11, 12])  # a rejected draft
    decoder.crop(10)
    again = decoder.forward(prompt[10:14])
    assert (first - again).abs().max().item() < 1e-4
    assert decoder.cached_tokens == prompt[:14]


def test_bad_input_raises_and_keeps_the_cache(decoder: LlamaCppDecoder, prompt: list[int]) -> None:
    decoder.crop(0)
    decoder.forward(prompt[:6])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decoder.forward([1, decoder.vocab_size + 5])
    with pytest.raises(ValueError, match="do not fit"):
        decoder.forward([1] * WINDOW)
    assert decoder.cached_tokens == prompt[:6]
    decoder.forward(prompt[6:8])  # still usable
    assert decoder.cached_tokens == prompt[:8]


def test_speculative_greedy_leaves_plain_only_at_near_ties(
    decoder: LlamaCppDecoder, prompt: list[int]
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_TARGET)
    settings = DecodeSettings(max_new_tokens=32)
    decoder.crop(0)
    recorder = MarginRecorder(decoder)
    plain = autoregressive_generate(recorder, prompt, settings, decode=tokenizer.decode)
    for k, corrupt_every in ((3, 3), (12, 5)):
        decoder.crop(0)
        drafter = ScriptedDrafter(prompt, plain.token_ids, corrupt_every=corrupt_every)
        speculative = speculative_generate(
            decoder, drafter, prompt, settings, FixedLength(k), decode=tokenizer.decode
        )
        assert speculative.stats.accepted > 0
        divergence = greedy_divergence(plain.token_ids, speculative.token_ids, recorder.margins)
        assert divergence is None or divergence.margin <= NEAR_TIE_MARGIN, divergence


def test_local_engine_runs_llama_cpp_by_default(model_dir: Path) -> None:
    from engine.api import CompletionRequest
    from engine.models import load_pair
    from engine.service import LocalEngine

    pair = load_pair(str(model_dir), "none", "cpu", "fp32", num_threads=1)
    engine = LocalEngine(pair=pair, max_context=WINDOW)
    assert engine.info().runtime.startswith("llama.cpp (target.gguf)"), engine.info().runtime
    torch_engine = LocalEngine(pair=pair, max_context=WINDOW, runtime="torch")
    assert torch_engine.info().runtime.startswith("lean (fp32)")
    request = CompletionRequest(
        prompt="import os\nimport sys\n\ndef main(", max_new_tokens=16, drafter="hybrid"
    )
    result = engine.complete(request)
    assert result.stats.new_tokens > 0 and result.finish_reason in ("length", "eos")
