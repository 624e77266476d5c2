"""Which target `specls demo` shows when none is named."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.catalog import DEFAULT_MODEL as DEMO_MODEL
from engine.catalog import PULL_RECORD, model_dir
from lsp_server.app.commands.demo import add_arguments, demo_target


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECLS_CACHE_DIR", str(tmp_path))
    return tmp_path


def _pull_record() -> None:
    folder = model_dir(DEMO_MODEL)
    folder.mkdir(parents=True)
    (folder / PULL_RECORD).write_text("{}")


def test_without_a_pull_the_demo_shows_the_bundled_pair(cache: Path) -> None:
    assert demo_target(_args()) is None


def test_a_pulled_demo_model_is_shown_when_nothing_is_named(cache: Path) -> None:
    _pull_record()
    assert demo_target(_args()) == DEMO_MODEL


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--target", "bundled"), "bundled"),
        (("--target", "/models/mine"), "/models/mine"),
        (("--draft", "/models/draft"), None),  # a named draft belongs with the bundled target
        (("--backend", "fake"), None),
    ],
)
def test_what_the_user_names_wins(cache: Path, argv: tuple[str, ...], expected: str | None) -> None:
    _pull_record()
    assert demo_target(_args(*argv)) == expected


def test_the_server_uses_the_same_default_when_no_model_is_named(cache: Path) -> None:
    from lsp_server.backends import local_target
    from lsp_server.config import ServerSettings

    assert local_target(ServerSettings(device="cpu")) is None  # nothing pulled: the bundled pair
    _pull_record()
    assert local_target(ServerSettings(device="cpu")) == DEMO_MODEL
    assert local_target(ServerSettings(device="cpu", draft="/models/draft")) is None
    assert local_target(ServerSettings(device="cpu", target="smollm2-135m")) == "smollm2-135m"
