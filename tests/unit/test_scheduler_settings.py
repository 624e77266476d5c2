"""Server settings: camelCase parsing, fallbacks with a report, command-line precedence; serve's flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lsp_server.app.commands import serve
from lsp_server.config import ServerSettings, apply_settings, settings_section


def test_defaults_match_the_documented_contract() -> None:
    settings = ServerSettings()
    assert (settings.backend, settings.target, settings.draft, settings.device) == (
        "local",
        None,
        None,
        "auto",
    )
    assert (settings.max_new_tokens, settings.temperature, settings.drafter) == (64, 0.0, "hybrid")
    assert (settings.debounce_ms, settings.first_line_first, settings.api_key_env) == (
        0,
        False,
        "SPECLS_API_KEY",
    )
    assert settings.context.max_lines == 8 and settings.context.max_prompt_tokens is None  # the machine's


def test_camel_case_settings_reach_nested_fields() -> None:
    raw = {
        "maxNewTokens": 32,
        "firstLineFirst": True,
        "maxLines": 3,
        "contextTokens": 512,
        "suffixTokens": 0,
        "suppressInComments": True,
        "suppressInStrings": False,
        "tokenHealing": False,
        "remoteModel": "coder",
        "fake": {"tokenDelayMs": 5, "rules": [["a", "b"]]},
    }
    settings, report = apply_settings(raw, ServerSettings())
    assert not report.invalid and not report.unknown
    assert settings.max_new_tokens == 32 and settings.first_line_first and settings.remote_model == "coder"
    assert settings.context.max_lines == 3 and settings.context.max_prompt_tokens == 512
    assert settings.context.max_suffix_tokens == 0  # no text after the cursor in the prompt
    back, report = apply_settings({"suffixTokens": None, "contextTokens": None}, settings)
    assert not report.invalid and back.context.max_suffix_tokens is None  # null: the machine chooses again
    assert back.context.max_prompt_tokens is None
    gate, report = apply_settings({"minFirstLineProbability": 0.5}, settings)
    assert not report.invalid and gate.context.min_first_line_probability == 0.5
    back, report = apply_settings({"minFirstLineProbability": None}, gate)
    assert not report.invalid and back.context.min_first_line_probability is None  # the model's again
    _, report = apply_settings({"suffixTokens": "auto"}, settings)
    assert report.invalid  # null is the way to say it; a string is an error the user is told about
    assert settings.context.suppress_in_comments and not settings.context.suppress_in_strings
    assert not settings.context.token_healing
    assert settings.fake.token_delay_ms == 5 and settings.fake.rules == (("a", "b"),)


def test_bad_values_fall_back_one_by_one_and_are_reported() -> None:
    raw = {
        "maxNewTokens": "many",
        "temperature": 9,
        "drafter": "magic",
        "firstLineFirst": "yes",
        "debounceMs": 2.5,
        "maxLines": True,
        "backend": "fake",
        "typo": 1,
        "fake": {"rules": "x"},
    }
    settings, report = apply_settings(raw, ServerSettings())
    assert settings.backend == "fake"  # the good value still applies
    assert settings.max_new_tokens == 64 and settings.temperature == 0.0 and settings.drafter == "hybrid"
    assert not settings.first_line_first and settings.debounce_ms == 0 and settings.context.max_lines == 8
    assert len(report.invalid) == 7 and report.unknown == ["unknown setting 'typo' ignored"]
    assert all("ignored" in line for line in report.invalid)


def test_non_object_settings_are_rejected_whole() -> None:
    settings, report = apply_settings(["not", "an", "object"], ServerSettings())
    assert settings == ServerSettings() and report.invalid


def test_did_change_configuration_payloads() -> None:
    assert settings_section({"specls": {"maxNewTokens": 3}}) == {"maxNewTokens": 3}
    assert settings_section({"maxNewTokens": 3}) == {"maxNewTokens": 3}


def test_model_key_changes_only_with_model_settings() -> None:
    base = ServerSettings()
    decoding, _ = apply_settings({"maxNewTokens": 10, "temperature": 0.5}, base)
    model, _ = apply_settings({"target": "/models/other"}, base)
    assert decoding.model_key() == base.model_key()
    assert model.model_key() != base.model_key()


def test_serve_flags_become_overriding_settings(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["def ", "main():"]]))
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(
        ["--backend", "fake", "--model", "m", "--fake-token-delay-ms", "7", "--fake-rules", str(rules)]
    )
    cli = serve.cli_settings(args)
    assert cli == {
        "backend": "fake",
        "remoteModel": "m",
        "fake": {"tokenDelayMs": 7.0, "rules": [["def ", "main():"]]},
    }
    from_editor, _ = apply_settings({"backend": "local", "maxNewTokens": 9}, ServerSettings())
    final, report = apply_settings(cli, from_editor)
    assert final.backend == "fake" and final.max_new_tokens == 9 and not report.invalid
    assert parser.parse_args([]).host == "127.0.0.1"
