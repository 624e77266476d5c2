"""One settings list: `lsp_server.config.SETTINGS` declares every server setting (key, type, and through the
attribute it sets, the default). The VS Code extension, the Neovim plugin, docs/configuration.md, the set-up
examples in the READMEs and `specls serve`'s flags must agree with it: names, types, defaults, choices."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lsp_server.config import MODEL_FIELDS, SETTINGS, ServerSettings, ValueType, declared_default

REPO = Path(__file__).resolve().parents[2]
VSCODE = REPO / "editor_clients" / "vscode"
NEOVIM = REPO / "editor_clients" / "neovim"
CONFIGURATION = REPO / "docs" / "configuration.md"
# VS Code settings that tell the extension how to reach the server; they are not sent to it.
CLIENT_ONLY = {"serverCommand", "serverArgs", "trace.server", "tcp", "tcpTokenFile"}


def _json(value: Any) -> Any:
    """A declared default as JSON writes it (tuples become lists)."""
    return json.loads(json.dumps(value))


def _types(json_type: str | list[str] | tuple[str, ...]) -> set[str]:
    return {json_type} if isinstance(json_type, str) else set(json_type)


def _vscode_properties() -> dict[str, dict[str, Any]]:
    manifest = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    return {name.removeprefix("specls."): spec for name, spec in properties.items()}


def _ts_array(name: str) -> list[str]:
    source = (VSCODE / "src" / "settings.ts").read_text(encoding="utf-8")
    body = re.search(rf"export const {name}: readonly \w+\[\] = \[(.*?)\];", source, flags=re.S)
    assert body, f"settings.ts has no {name} array"
    return re.findall(r'"([^"]+)"', body.group(1))


def _ts_interface_keys() -> set[str]:
    source = (VSCODE / "src" / "settings.ts").read_text(encoding="utf-8")
    body = re.search(r"export interface ServerSettings \{(.*?)\n\}", source, flags=re.S)
    assert body, "settings.ts has no ServerSettings interface"
    return set(re.findall(r"^\s*(\w+):", body.group(1), flags=re.M))


def test_the_declaration_is_whole() -> None:
    settings = ServerSettings()
    assert len(SETTINGS) >= 20
    for key, (_path, value_type) in SETTINGS.items():
        assert isinstance(value_type, ValueType), key
        declared_default(key)  # every path reaches a field
        # The default is a value the setting itself accepts, so an editor that sends it back changes nothing.
        assert value_type(_json(declared_default(key))) == declared_default(key), key
    fields = {f.name for f in dataclasses.fields(settings)}
    assert set(MODEL_FIELDS) <= fields


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_vscode_declares_the_setting_with_its_type_default_and_choices(key: str) -> None:
    spec = _vscode_properties().get(key)
    assert spec is not None, f"editor_clients/vscode/package.json lacks specls.{key}"
    value_type = SETTINGS[key][1]
    assert _types(spec["type"]) == _types(value_type.json_type), key
    assert spec["default"] == _json(declared_default(key)), key
    assert set(spec.get("enum", ())) == set(value_type.choices), key  # the UI may order them
    assert spec.get("minimum") == value_type.minimum, key
    assert spec.get("maximum") == value_type.maximum, key
    assert spec.get("description"), key


def test_vscode_declares_no_server_setting_the_server_lacks() -> None:
    extra = set(_vscode_properties()) - set(SETTINGS) - CLIENT_ONLY
    assert not extra, f"package.json declares settings the server does not know: {sorted(extra)}"


def test_vscode_sends_every_setting_and_restarts_on_the_model_ones() -> None:
    assert _ts_array("SERVER_KEYS") == list(SETTINGS), "settings.ts SERVER_KEYS, in declaration order"
    assert _ts_interface_keys() == set(SETTINGS)
    model_keys = {key for key, (path, _) in SETTINGS.items() if path in MODEL_FIELDS}
    assert set(_ts_array("RESTART_KEYS")) - CLIENT_ONLY == model_keys


def test_neovim_plugin_adds_no_defaults_of_its_own() -> None:
    # The plugin sends only what the user put in `settings`; every other value is the server's declared one.
    source = (NEOVIM / "lua" / "specls" / "config.lua").read_text(encoding="utf-8")
    defaults = re.search(r"^M\.defaults = \{(.*?)^\}", source, flags=re.S | re.M)
    assert defaults and re.search(r"^  settings = \{\},", defaults.group(1), flags=re.M)
    listed = re.search(r"camelCase, as in the server's docs\):\n\s*-- (.*)", defaults.group(1))
    assert listed, "config.lua no longer lists the server settings it forwards"
    names = [name for name in re.split(r",\s*", listed.group(1)) if name.strip(". ")]
    assert names and set(names) <= set(SETTINGS), names


def _example_keys() -> dict[str, set[str]]:
    """Server settings named in the set-up examples: Lua `settings`/`init_options` tables, Helix `config`,
    eglot's `:initializationOptions` and Zed's `initialization_options`."""
    found: dict[str, set[str]] = {}
    pages = [
        REPO / "README.md",
        REPO / "editor_clients" / "README.md",
        NEOVIM / "builtin_client.lua",
        *sorted((NEOVIM / "lua" / "specls").glob("*.lua")),
    ]
    tables = [
        r"\b(?:settings|init_options) = \{([^{}\n]*)\}",
        r"^config = \{([^{}\n]*)\}",
        r'"initialization_options": \{([^{}\n]*)\}',
    ]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        keys: set[str] = set()
        for pattern in tables:
            for body in re.findall(pattern, text, flags=re.M):
                keys |= set(re.findall(r'"?(\w+)"?\s*[=:]', body))
        for body in re.findall(r":initializationOptions \(([^()]*)\)", text):
            keys |= set(re.findall(r":(\w+)", body))
        if keys:
            found[str(page.relative_to(REPO))] = keys
    return found


def test_setup_examples_name_only_declared_settings() -> None:
    found = _example_keys()
    assert "README.md" in found and "editor_clients/README.md" in found, found
    for page, keys in found.items():
        assert keys <= set(SETTINGS), f"{page} names unknown settings: {sorted(keys - set(SETTINGS))}"
    # settings.json keys in the clients' page; the settings table of the extension's own page
    for page, quote in ((REPO / "editor_clients" / "README.md", '"'), (VSCODE / "README.md", "`")):
        named = set(re.findall(rf"{quote}specls\.(\w[\w.]*){quote}", page.read_text(encoding="utf-8")))
        assert named and named <= set(_vscode_properties()), (page, sorted(named - set(_vscode_properties())))


def _doc_table(heading: str) -> list[list[str]]:
    text = CONFIGURATION.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_configuration_page_lists_every_setting_with_its_default() -> None:
    rows = _doc_table("Settings")
    keys = [row[0].strip("`") for row in rows]
    assert keys == list(SETTINGS), "docs/configuration.md: one row per setting, in declaration order"
    for key, default, effect in (row[:3] for row in rows):
        key = key.strip("`")
        assert json.loads(default.strip("`")) == _json(declared_default(key)), key
        assert effect, key


def _cli() -> tuple[argparse.ArgumentParser, Callable[[argparse.Namespace], dict[str, Any]]]:
    """The `specls` parser and serve's flags-to-settings function, found through the console script."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module = importlib.import_module(scripts["specls"].split(":")[0])
    parser = module.build_parser()
    serve_run = parser.parse_args(["serve"])._run
    return parser, sys.modules[serve_run.__module__].cli_settings


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _serve_flags() -> dict[str, tuple[str, argparse.Action]]:
    """Each serve flag that sets a top-level setting: flag -> (setting key, action), found by trying it."""
    parser, cli_settings = _cli()
    serve = _subparser(parser, "serve")
    flags: dict[str, tuple[str, argparse.Action]] = {}
    for action in serve._actions:
        flag = next((s for s in action.option_strings if s.startswith("--")), None)
        if flag is None or action.nargs == 0 or flag.startswith("--fake"):
            continue
        value = str(list(action.choices)[-1]) if action.choices else "7"
        produced = {k: v for k, v in cli_settings(parser.parse_args(["serve", flag, value])).items()}
        if produced:
            assert len(produced) == 1, (flag, produced)
            flags[flag] = (next(iter(produced)), action)
    return flags


def test_serve_flags_set_declared_settings_with_their_choices() -> None:
    flags = _serve_flags()
    for flag, (key, action) in flags.items():
        assert key in SETTINGS, (flag, key)
        if SETTINGS[key][1].choices:
            assert set(action.choices or ()) == set(SETTINGS[key][1].choices), flag
    # Every setting that picks the model or how it runs has a flag.
    runtime_keys = {"backend", "target", "draft", "device", "dtype", "runtime", "quantize", "endpoint"}
    assert runtime_keys <= {key for key, _ in flags.values()}
    # The configuration page's flag table is what the flags do.
    documented = {row[0].strip("`"): row[1].strip("`") for row in _doc_table("`specls serve`")}
    assert documented == {flag: key for flag, (key, _) in flags.items()}


def test_what_bench_can_measure_serve_can_run() -> None:
    # A bench option that names a server setting (its dest is the attribute) is a setting serve has, with
    # the same choices; one that picks the model or how it runs is also a serve flag.
    parser, _ = _cli()
    serve = {a.dest: a for a in _subparser(parser, "serve")._actions}
    by_path = {path: key for key, (path, _) in SETTINGS.items()}
    bench = _subparser(parser, "bench")
    fields = {f.name for f in dataclasses.fields(ServerSettings)}
    checked = set()
    for name in ("throughput", "keystrokes", "lines", "infill", "draft-length"):
        for action in _subparser(bench, name)._actions:
            if action.dest not in fields:
                continue
            where = f"bench {name} {action.option_strings}"
            assert action.dest in by_path, f"{where}: no server setting sets {action.dest}"
            assert set(action.choices or ()) <= set(SETTINGS[by_path[action.dest]][1].choices), where
            if action.dest in MODEL_FIELDS:
                assert action.dest in serve, f"{where} has no serve flag"
            checked.add(action.dest)
    assert {"runtime", "quantize", "dtype", "target", "max_new_tokens"} <= checked
