"""The README stays true and short: its links resolve, its two set-up commands are the ones CI runs, and the
detail lives in docs/ (one page each), reached within the first 120 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SETUP_COMMANDS = (
    "bash scripts/setup.sh && .venv/bin/specls demo",
    "bash scripts/test.sh",
)
DOC_PAGES = (
    "configuration",
    "performance",
    "precision",
    "line-starts",
    "design",
    "training",
    "troubleshooting",
    "models",
    "remote",
    "demo",
)
# Markdown links and images: [text](target) or ![alt](target); the target ends at a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _local_targets(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _pages() -> list[Path]:
    others = [REPO / "ARCHITECTURE.md", REPO / "editor_clients" / "README.md", REPO / "bench" / "README.md"]
    return [README, *others, *sorted((REPO / "docs").glob("*.md"))]


def test_link_finder_sees_links_and_images() -> None:
    # The finder must see what the checks below rely on, or they would pass on any text.
    sample = "see [docs](docs/a.md), ![pic](docs/images/b.png) and [web](https://x.org) [here](#top)"
    assert LINK.findall(sample) == ["docs/a.md", "docs/images/b.png", "https://x.org", "#top"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_local_link_resolves_to_a_file(page: Path) -> None:
    targets = _local_targets(page)
    missing = [t for t in targets if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


def test_readme_links_every_docs_page_and_each_page_exists() -> None:
    targets = set(_local_targets(README))
    for name in DOC_PAGES:
        assert (REPO / "docs" / f"{name}.md").is_file(), f"docs/{name}.md is missing"
        assert f"docs/{name}.md" in targets, f"the README does not link docs/{name}.md"
    for image in sorted((REPO / "docs" / "images").glob("*.png")):
        assert f"docs/images/{image.name}" in targets, f"the README does not show {image.name}"


def test_readme_holds_the_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = README.read_text(encoding="utf-8")
    for command in SETUP_COMMANDS:
        assert re.search(rf"^{re.escape(command)}(\s|$)", readme, flags=re.M), f"README lacks `{command}`"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ran = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "bash scripts/test.sh" in ran


def test_readme_is_short_and_reaches_docs_early() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if "](docs/" in line and "](docs/images/" not in line)
    assert first < 120, f"the first link to docs/ is on line {first + 1}"
    assert len(lines) <= 160, f"the README has {len(lines)} lines; move detail to docs/"


def test_readme_names_the_default_models_from_the_catalog() -> None:
    from engine.catalog import DEFAULT_LARGE_MODEL, DEFAULT_MODEL

    text = README.read_text(encoding="utf-8")
    assert f"`{DEFAULT_MODEL}` (default where the 1.5B's keystroke budget does not fit)" in text
    assert f"`{DEFAULT_LARGE_MODEL}` (default on a GPU, or a CPU fast enough for it" in text
