"""The model loaded when none is named (`engine.hardware.choose_default_model`): the largest one the machine
affords among those pulled, and a reason that says what to pull for better; table-tested without models."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.hardware
from engine.catalog import (
    DEFAULT_LARGE_MODEL,
    DEFAULT_MODEL,
    PULL_RECORD,
    default_target,
    default_target_choice,
    model_dir,
)
from engine.costs import StepCosts, conservative_speedup
from engine.hardware import choose_default_model

LARGE, SMALL = DEFAULT_LARGE_MODEL, DEFAULT_MODEL
AMX = (True, "CPU flags avx512_bf16, amx_bf16")
AVX2 = (False, "torch runs AVX2 kernels on this CPU")
BOTH = {LARGE, SMALL}


@pytest.mark.parametrize(
    ("device", "native", "pulled", "expected", "said"),
    [
        ("cuda", (False, "not a CPU"), BOTH, LARGE, f"drafted by {SMALL}"),
        ("cpu", AMX, BOTH, LARGE, "native bf16 (CPU flags avx512_bf16, amx_bf16)"),
        ("cpu", AMX, {LARGE}, LARGE, f"`specls pull {SMALL}` lets {SMALL} draft"),
        ("cpu", AMX, {SMALL}, SMALL, f"`specls pull {LARGE}` would give better suggestions on this machine"),
        ("cuda", (False, "not a CPU"), {SMALL}, SMALL, f"`specls pull {LARGE}`"),
        (
            "cpu",
            AMX,
            set(),
            None,
            f"the bundled pair runs; a CPU with native bf16 (CPU flags avx512_bf16, amx_bf16) affords the {LARGE}: `specls pull {LARGE}`",
        ),
        ("cpu", AVX2, BOTH, SMALL, "no native bf16 (torch runs AVX2 kernels on this CPU)"),
        ("cpu", AVX2, {SMALL}, SMALL, "past the keystroke budget"),
        (
            "cpu",
            AVX2,
            {LARGE},
            None,
            f"`specls pull {SMALL}` (`--target {LARGE}` runs the pulled {LARGE} anyway)",
        ),
        (
            "cpu",
            AVX2,
            set(),
            None,
            f"the {SMALL} is not pulled, so the bundled pair runs: `specls pull {SMALL}`;",
        ),
        ("mps", (False, "not a CPU"), BOTH, SMALL, f"the {LARGE} was never measured on mps"),
        ("cpu", AMX, {"smollm2-135m"}, None, "nothing is pulled"),  # other pulls never become the default
    ],
)
def test_the_largest_affordable_pulled_model_wins(
    device: str, native: tuple[bool, str], pulled: set[str], expected: str | None, said: str
) -> None:
    name, reason = choose_default_model(device, native, pulled)
    assert name == expected
    assert said in reason


def test_a_better_model_is_suggested_only_where_it_would_fit() -> None:
    assert f"specls pull {LARGE}" not in choose_default_model("cpu", AVX2, {SMALL})[1]


def _pull(*names: str) -> None:
    for name in names:
        model_dir(name).mkdir(parents=True)
        (model_dir(name) / PULL_RECORD).write_text("{}")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECLS_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("native", "expected"), [(AMX, LARGE), (AVX2, SMALL)])
def test_default_target_reads_this_machine_and_the_pulls(
    cache: Path, monkeypatch: pytest.MonkeyPatch, native: tuple[bool, str], expected: str
) -> None:
    monkeypatch.setattr(engine.hardware, "native_bf16", lambda: native)
    assert default_target("cpu") is None
    _pull(SMALL, LARGE)
    assert default_target("cpu") == expected
    assert default_target_choice("cpu") == choose_default_model("cpu", native, BOTH)
    assert default_target("cuda") == LARGE  # any CUDA GPU affords it, whatever the CPU


def test_the_server_names_why_and_a_setting_overrides(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lsp_server.backends import local_target_choice
    from lsp_server.config import ServerSettings

    monkeypatch.setattr(engine.hardware, "native_bf16", lambda: AMX)
    _pull(SMALL, LARGE)
    assert local_target_choice(ServerSettings(device="cpu")) == (
        LARGE,
        choose_default_model("cpu", AMX, BOTH)[1],
    )
    named, why = local_target_choice(ServerSettings(device="cpu", target=SMALL))
    assert named == SMALL and "named" in why


def test_doctor_says_which_model_and_why(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lsp_server.app.commands.doctor_models import check_model_choice

    monkeypatch.setattr(engine.hardware, "native_bf16", lambda: AVX2)
    target, checks = check_model_choice(None, None, "cpu")
    assert target is None and checks[0].detail.startswith("the bundled pair: ")
    assert f"`specls pull {SMALL}`" in checks[0].detail
    _pull(SMALL)
    target, checks = check_model_choice(None, None, "cpu")
    assert target == SMALL and checks[0].detail.startswith(f"{SMALL}: no native bf16")
    assert check_model_choice(LARGE, None, "cpu")[0] == LARGE


# The 1.5B with the 0.5B drafting on the 2-core AMX Xeon (throughput-qwen15-pair-warm-bf16-amx-cpu.md):
# a draft step 0.17 target steps, verifies of 1-16 drafts 1.01-1.41 steps.
QWEN15_PAIR = StepCosts(widths=(1, 2, 4, 8, 16), verify=(1.01, 1.04, 1.04, 1.07, 1.41), draft_step=0.17)


def test_the_conservative_speedup_is_well_below_the_measured_one() -> None:
    speedup = conservative_speedup(QWEN15_PAIR)
    assert 1.3 < speedup < 2.51  # measured 2.51x at an acceptance of 0.91
    assert conservative_speedup(QWEN15_PAIR, acceptance=0.91) > speedup


def test_a_draft_that_never_pays_earns_nothing() -> None:
    costly = StepCosts(widths=(1, 8), verify=(1.5, 3.0), draft_step=1.0)
    assert conservative_speedup(costly) == 1.0
    assert conservative_speedup(QWEN15_PAIR, acceptance=0.0) == 1.0


def test_doctor_warns_with_the_numbers_when_the_loaded_model_does_not_fit() -> None:
    from lsp_server.app.commands.doctor_server import check_budget

    assert check_budget({}) == []  # an older server, or a backend that measured nothing
    assert check_budget({"keystroke_budget": {"fits": None, "detail": "not measured by this backend"}}) == []
    (fits,) = check_budget({"keystroke_budget": {"fits": True, "detail": "fits: ..."}})
    assert (fits.status, fits.detail) == ("ok", "fits: ...")
    (slow,) = check_budget({"keystroke_budget": {"fits": False, "detail": "does not fit: 2.10 s"}})
    assert (slow.status, slow.detail) == ("warn", "does not fit: 2.10 s") and "--target" in slow.fix


def test_stats_say_which_model_runs_why_and_whether_it_fits() -> None:
    from types import SimpleNamespace

    from engine.api import BackendInfo
    from lsp_server.handlers.feedback import stats_request
    from lsp_server.statistics import Statistics

    info = BackendInfo(
        "local", LARGE, SMALL, (), 8192, "cpu", step_s=0.05, prompt_tokens_per_s=650, model_choice="because"
    )
    ls = SimpleNamespace(
        scheduler=SimpleNamespace(stats=Statistics(), state="ready", info=info),
        settings=SimpleNamespace(backend="local", first_line_first=True, drafter="hybrid"),
        store=SimpleNamespace(position_encoding="utf-16"),
    )
    stats = stats_request(ls, None)
    assert stats["model_choice"] == "because"
    assert stats["keystroke_budget"]["fits"] is True and stats["keystroke_budget"]["detail"].startswith(
        "fits: "
    )
