"""A mistyped catalog name is an error naming the close match, never a hub lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.catalog import CATALOG
from engine.models import ModelLoadError, close_catalog_name, resolve_model_path


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no folder of these names exists here


@pytest.mark.parametrize(
    "typo", ["smollm2", "SmolLM2-135M", "smollm2-135", "smolm2-135m", "smollm2-135m-instruct"]
)
def test_a_near_miss_of_smollm2_names_it_and_is_not_a_hub_id(typo: str) -> None:
    with pytest.raises(ModelLoadError, match="did you mean 'smollm2-135m'"):
        resolve_model_path(typo)


def test_a_near_miss_of_a_qwen_name_names_one() -> None:
    names = {name for name in CATALOG if name.startswith("qwen2.5-coder")}
    if not names:
        pytest.skip("the catalog has no qwen2.5-coder entries yet")
    with pytest.raises(ModelLoadError, match="did you mean 'qwen2.5-coder-"):
        resolve_model_path("qwen2.5-coder")
    assert close_catalog_name("Qwen2.5-Coder-1.5B", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]) == (
        "qwen2.5-coder-1.5b"
    )


@pytest.mark.parametrize("hub_id", ["gpt2", "HuggingFaceTB/SmolLM2-135M", "bigcode/starcoder2-3b"])
def test_real_hub_ids_stay_hub_ids(hub_id: str) -> None:
    source = resolve_model_path(hub_id)
    assert (source.location, source.is_local) == (hub_id, False)


def test_close_match_rules() -> None:
    names = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert close_catalog_name("qwen2.5-coder", names) == "qwen2.5-coder-0.5b"  # the shortest prefix match
    assert close_catalog_name("qwen2.5-coder-1.5", names) == "qwen2.5-coder-1.5b"
    assert close_catalog_name("org/smollm2", names) is None
    assert close_catalog_name("q", names) is None
    assert close_catalog_name("gpt2", names) is None
