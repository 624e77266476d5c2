"""`specls doctor`: clear failures with a fix for a missing or broken model folder, version checks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from lsp_server.app.commands import doctor


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_missing_model_folders_fail_with_a_fix(tmp_path: Path) -> None:
    checks = doctor.check_model_pair(str(tmp_path / "no-target"), str(tmp_path / "no-draft"))
    by_name = {check.name: check for check in checks}
    assert by_name["target model"].status == "fail"
    assert "does not exist" in by_name["target model"].detail
    assert "--target" in by_name["target model"].fix
    assert by_name["draft model"].status == "fail"
    assert by_name["tokenizers"].status == "skip"


def test_folder_without_weights_fails(tmp_path: Path) -> None:
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    check = doctor.check_model_pair(str(folder), str(tmp_path / "missing"))[0]
    assert check.status == "fail" and "model.safetensors" in check.detail


def test_doctor_exits_nonzero_and_says_what_to_do_when_the_model_folder_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "models" / "target"
    status = doctor.run(_args(target=str(missing), draft=str(tmp_path / "models" / "draft")))
    out = capsys.readouterr().out
    assert status == 1
    assert f"FAIL  target model: target model folder '{missing}' does not exist" in out
    assert "fix: pass --target a folder that holds config.json" in out
    assert "skip  server: not started: fix the problems above first" in out
    assert "problems found" in out


def test_missing_bundled_pair_points_at_specls_train(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import engine.models

    monkeypatch.setattr(engine.models, "BUNDLED_DIR", tmp_path / "bundled")
    check = doctor.check_model_pair(None, None)[0]
    assert check.status == "fail" and "bundled target model is missing" in check.detail
    assert "specls train" in check.fix


def test_versions_outside_the_pins_warn_and_missing_packages_fail() -> None:
    checks = doctor.check_versions({"pygls": "==0.0.1", "surely-not-installed-specls-dep": ">=1"})
    by_name = {check.name: check for check in checks}
    assert by_name["pygls"].status == "warn" and "tested with ==0.0.1" in by_name["pygls"].detail
    assert by_name["surely-not-installed-specls-dep"].status == "fail"


def test_pins_come_from_the_project() -> None:
    wanted = doctor.pinned_requirements()
    assert wanted["transformers"] == "==5.24.*" and wanted["pygls"] == "==2.1.1"


def test_grammars_all_parse() -> None:
    checks = doctor.check_grammars()
    assert [check.status for check in checks] == ["ok"]
    assert checks[0].detail == "python, javascript, typescript, tsx, go, rust"


def test_format_check() -> None:
    text = doctor.format_check(doctor.Check("torch", "fail", "broken", "reinstall"))
    assert text == "  FAIL  torch: broken\n        fix: reinstall"


def test_a_check_that_cannot_run_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> list[doctor.Check]:
        raise ImportError("No module named 'tree_sitter'")

    monkeypatch.setattr(doctor, "check_grammars", broken)
    status = doctor.run(_args(no_server=True))
    out = capsys.readouterr().out
    assert status == 1
    assert (
        "FAIL  tree-sitter grammars: the check itself failed: ImportError: No module named 'tree_sitter'"
        in out
    )


def test_doctor_says_what_the_weights_will_take_in_the_chosen_precision() -> None:
    from engine.models import BUNDLED_DIR, safetensors_params
    from lsp_server.app.commands.doctor_models import check_dtype

    folder = BUNDLED_DIR / "target"
    checks = {check.name: check for check in check_dtype(str(folder), "cpu", "fp32")}
    expected_mb = safetensors_params(folder) * 4 / 2**20
    assert checks["memory"].status == "ok"
    assert f"{expected_mb:,.0f} MB" in checks["memory"].detail and "fp32" in checks["memory"].detail


def test_doctor_says_w8a8_and_bf16_part_only_at_near_ties_and_plain_fp32_never(monkeypatch) -> None:
    import engine.hardware
    from engine.models import BUNDLED_DIR
    from engine.quantize import rowwise_int8_available
    from lsp_server.app.commands.doctor_models import check_dtype

    small = str(BUNDLED_DIR / "target")  # overhead-bound: plain fp32
    assert "token-identical" in check_dtype(small, "cpu", "fp32")[0].detail
    assert "near-ties" in check_dtype(small, "cpu", "bf16")[0].detail
    if not rowwise_int8_available():
        pytest.skip("no fbgemm: fp32 stays plain")
    monkeypatch.setattr(engine.hardware, "OVERHEAD_BOUND_PARAMS", 1)  # as for a 0.5B model: W8A8 in fp32
    detail = check_dtype(small, "cpu", "fp32")[0].detail
    assert "w8a8: greedy speculative output may differ" in detail and "--quantize none: never" in detail
