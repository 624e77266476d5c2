"""`specls bench keystrokes`: what a person typing real files gets from `specls serve`.

The client is the demo's replay (`lsp_server.typist.replay.Replay`), which drives the server over stdio the way
VS Code does: a `didChange` and an inline-completion request per key press, the previous request cancelled,
ghost text kept while the typing agrees with it, Tab when the ghost text is exactly the rest of the line and
accept-line for each further right line. For each file a region of `--chars` characters is cut out (by
default from held-out stdlib files, at the cursor rule of `bench.prompts`) and typed back at a fixed pace
(120 ms a key by default) with a pause after each Enter.

Reported: the share of key presses with ghost text on screen when they came (and with it right), the share
of characters saved by Tab, latencies, why requests came back empty (the server's counts), and the time
from opening a file to its first suggestion, right away and after a 1 s pause. From `specls/stats`: KV prefix
reuse, tokens generated and wasted, and cancel -> idle (the engine's own clock from a cancel to the worker
being free again).
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.metrics import percentile, write_result_files

if TYPE_CHECKING:
    from lsp_server.typist.measures import Asker, OpenProbe
    from lsp_server.typist.replay import Editor, KeyEvent

URI_ROOT = "file:///bench"


@dataclass
class KeystrokeConfig:
    files: tuple[Path, ...] = ()  # empty: held-out stdlib files
    count: int = 3  # held-out files to type when `files` is empty
    chars: int = 300  # characters typed per file (rounded up to the end of the line)
    backend: str = "local"
    target: str | None = None
    draft: str | None = None
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None  # OMP_NUM_THREADS for the server process (torch's CPU threads)
    endpoint: str | None = None
    remote_model: str | None = None
    pace_ms: float = 120  # between key presses
    line_pause_ms: float = 600  # more, after each Enter
    accept: bool = True  # press Tab / accept-line when the ghost text is right
    probes: int = 6  # files opened for the first-suggestion probes (half at once, half after a pause)
    probe_pause_s: float = 1.0
    probe_chars: int = 7000  # the probe files are cut to about this many characters (~2,000 tokens)
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)  # initializationOptions for the server
    out: Path = Path("bench/results")
    tag: str = "cpu"
    timeout_s: float = 300  # for loading the model and for the last answer of each file
    peer: str | None = None  # "llama-server": the same typing, in the same run, into a llama.vim-style client
    server_log_level: str = "WARNING"  # INFO logs each warm-up and growth: to find out why, not to time
    # The client's workspace folder, as in an editor with a project open: the files typed from under it keep
    # their own file: URIs, so the server indexes their project (None: every file outside any folder).
    workspace: Path | None = None


@dataclass
class Region:
    name: str
    text: str  # the whole file as it will be once typed
    start: int  # where typing starts
    end: int  # where it stops


def cadence_of(config: KeystrokeConfig) -> Any:
    from lsp_server.typist.keystrokes import Cadence

    return Cadence(
        config.pace_ms, jitter=0.0, line_pause=config.line_pause_ms / config.pace_ms, symbol_pause=0.0
    )


def default_regions(config: KeystrokeConfig) -> list[Region]:
    from bench.prompts import cursor_in, held_out_files

    sources = (
        [(str(path), path.read_text(encoding="utf-8", errors="replace")) for path in config.files]
        if config.files
        else held_out_files()
    )
    regions: list[Region] = []
    for name, text in sources:
        if not config.files and len(regions) >= config.count:
            break
        found = cursor_in(text)
        if found is None:
            if config.files:
                raise ValueError(f"{name}: too short to replay (needs at least 40 lines)")
            continue
        _, start, _ = found
        start = text.rfind("\n", 0, start) + 1  # from the start of the cursor line
        # ... to the end of a line: the text after the cursor then starts on the next line, as when writing
        # new code above existing code (ending mid-word would glue every typed word onto the next one).
        end = text.find("\n", min(len(text), start + config.chars))
        regions.append(Region(name, text, start, len(text) if end == -1 else end))
    return regions


def region_uri(region: Region, workspace: Path | None) -> str:
    """The URI a region's file is typed under: its own where it lies in the workspace folder, else one under
    URI_ROOT, outside any folder."""
    path = Path(region.name).resolve()
    if workspace is not None and path.is_file() and path.is_relative_to(workspace.resolve()):
        return path.as_uri()
    return f"{URI_ROOT}/{region.name.lstrip('/')}"


def serve_args(config: KeystrokeConfig, log_file: Path) -> list[str]:
    """The arguments after `specls serve`."""
    args = ["--backend", config.backend]
    for flag, value in (
        ("--target", config.target),
        ("--draft", config.draft),
        ("--device", config.device),
        ("--dtype", config.dtype),
        ("--endpoint", config.endpoint),
        ("--model", config.remote_model),
    ):
        if value:
            args += [flag, value]
    return args + ["--log-file", str(log_file), "--log-level", config.server_log_level]


def probe_files(config: KeystrokeConfig, skip: int) -> list[tuple[str, str, int]]:
    """(name, document, cursor) for the first-suggestion probes: held-out files after the `skip` replayed
    ones, cut to about `probe_chars` at a line end, with the rest of one line removed after its indentation
    (the cursor rule of `bench.prompts`): a line start inside a file of about 2,000 tokens."""
    from bench.prompts import cursor_in, held_out_files

    found: list[tuple[str, str, int]] = []
    for name, text in held_out_files()[skip:]:
        if len(found) >= config.probes:
            break
        if len(text) < config.probe_chars:
            continue
        cut = text[: text.find("\n", config.probe_chars) + 1 or len(text)]
        cursor = cursor_in(cut)
        if cursor is None:
            continue
        _, offset, removed = cursor
        found.append((name, cut[:offset] + cut[offset + len(removed) :], offset))
    return found


async def type_regions(
    make_editor: Callable[[Region], Editor], regions: list[Region], config: KeystrokeConfig, progress: bool
) -> list[tuple[Region, list[KeyEvent]]]:
    """The typist of every row: each region typed into the editor `make_editor` gives for it."""
    from tqdm import tqdm

    from lsp_server.typist.replay import Replay

    rng = random.Random(config.seed)
    typed: list[tuple[Region, list[KeyEvent]]] = []
    total = sum(len(r.text[r.start : r.end]) for r in regions)
    with tqdm(total=total, desc="characters", unit="char", disable=not progress) as bar:
        for region in regions:
            replay = Replay(
                make_editor(region),
                region.text,
                cadence_of(config),
                start=region.start,
                end=region.end,
                rng=rng,
                accept=config.accept,
            )
            events = await replay.run()
            bar.update(region.end - region.start)
            typed.append((region, events))
    return typed


async def probe_opening(
    asker: Asker, probes: list[tuple[str, str, int]], config: KeystrokeConfig
) -> list[OpenProbe]:
    """Open each probe file, wait (every other one) `probe_pause_s`, time the first suggestion."""
    from lsp_server.typist.measures import probe_after_open

    opened = []
    for number, (name, text, offset) in enumerate(probes):
        pause = config.probe_pause_s if number % 2 else 0.0
        uri = f"{URI_ROOT}/probe/{number}/{name.lstrip('/')}"
        opened.append(await probe_after_open(asker, name, uri, text, offset, "python", pause))
    return opened


def row_measures(typed: list[tuple[Region, list[KeyEvent]]], opened: list[OpenProbe]) -> dict[str, Any]:
    """What the user got: the same measures for every row."""
    from lsp_server.typist.measures import Typed, probe_measures, user_measures

    summary = user_measures([Typed(events, region.end - region.start) for region, events in typed])
    summary["open_to_first_suggestion_ms"] = probe_measures(opened)
    return summary


def keystroke_records(typed: list[tuple[Region, list[KeyEvent]]]) -> list[dict[str, Any]]:
    return [
        asdict(event) | {"file": region.name, "latency_ms": event.latency_ms}
        for region, events in typed
        for event in events
    ]


async def run_keystrokes_async(config: KeystrokeConfig, progress: bool = True) -> dict[str, Any]:
    from engine.hardware import cpu_class
    from lsp_server.typist.client import ServerSession, served_code
    from lsp_server.typist.replay import LspEditor

    regions = default_regions(config)
    if not regions:
        raise RuntimeError("no files to replay")
    # Probe files are held-out stdlib files after the replayed ones (with --file: from the first one).
    probes = probe_files(config, skip=0 if config.files else len(regions)) if config.probes else []
    config.out.mkdir(parents=True, exist_ok=True)
    log_file = Path(tempfile.gettempdir()) / f"specls-bench-keystrokes-{config.tag}.log"  # warnings only
    session = ServerSession("specls-bench")
    load_before = os.getloadavg()
    try:
        env = {"OMP_NUM_THREADS": str(config.threads)} if config.threads else {}
        await session.start(
            serve_args(config, log_file),
            env=env,
            initialization_options=config.settings or None,
            workspace=config.workspace,
        )
        await session.wait_ready(config.timeout_s)
        opened = await probe_opening(session, probes, config)
        before = await session.stats()  # the server's counters over the typing alone

        def lsp_editor(region: Region) -> Editor:
            return LspEditor(session, region_uri(region, config.workspace), "python", poll_stats=False)

        typed = await type_regions(lsp_editor, regions, config, progress)
        await asyncio.sleep(0.5)  # let the last cancel->idle record arrive
        after = await session.stats()
    finally:
        await session.stop()
    load_after = os.getloadavg()
    summary = row_measures(typed, opened)
    summary["server"] = server_deltas(before, after)
    summary["wasted_tokens"] = wasted_tokens(
        config, typed, summary["server"]["generated_tokens"], summary["server"]["respelled_tokens"]
    )
    result: dict[str, Any] = {
        "benchmark": "keystrokes",
        "config": {
            **asdict(config),
            "out": str(config.out),
            "files": [str(p) for p in config.files],
            "workspace": str(config.workspace) if config.workspace is not None else None,
        },
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # The machine's 1-minute load average when the run started and ended (what else was running).
        "load_average": {"start": load_before[0], "end": load_after[0], "cpus": os.cpu_count()},
        "cpu_class": cpu_class(),
        "cpu_environment": {name: os.environ[name] for name in ISA_VARIABLES if name in os.environ},
        "regions": [{"name": r.name, "start": r.start, "chars": r.end - r.start} for r in regions],
        "server_log": str(log_file),
        "served_code": served_code(),
        "server_info": {
            "last_status": session.statuses[-1] if session.statuses else None,
            "messages": list(session.messages),
        },
        "summary": summary,
        "goals": {
            "ghost_on_screen": 0.70,
            "chars_saved": 0.25,
            "after_pause_p50_ms": 300,
            "right_after_open_ms": 1500,
            "cancel_to_idle_p95_ms": 20,
        },
        "probes": [asdict(probe) for probe in opened],
        "keystrokes": keystroke_records(typed),
    }
    if config.peer == "llama-server":
        result["peers"] = {"llama-server": await llama_vim_row(config, regions, probes, progress)}
    elif config.peer:
        raise ValueError(f"unknown peer {config.peer!r} (known: llama-server)")
    return result


# The variables that lower the instruction set torch, oneDNN, MKL and fbgemm use (an emulated CPU class).
ISA_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "FBGEMM_ENABLE_INSTRUCTIONS",
)


def peer_gguf(config: KeystrokeConfig) -> Path:
    """The GGUF beside the target's folder (what `specls pull` stores): the model the peer serves."""
    from engine.catalog import default_target
    from engine.llama_cpp_decoder import find_gguf
    from engine.models import resolve_model_path

    spec = config.target or default_target()
    folder = Path(str(resolve_model_path(spec, "target").location)) if spec else None
    gguf = find_gguf(folder) if folder is not None else None
    if gguf is None:
        raise RuntimeError(
            f"--peer llama-server needs the target's GGUF; none beside {folder or 'the bundled model'}"
        )
    return gguf


def native_cpu_class() -> str:
    """The CPU class of code that picks its kernels from the CPU itself (llama.cpp): the flags, not torch's
    possibly lowered capability."""
    from engine.hardware import cpu_class

    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return cpu_class()
    flags = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "").split()
    return cpu_class("AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "DEFAULT", cpuinfo)


async def llama_vim_row(
    config: KeystrokeConfig, regions: list[Region], probes: list[tuple[str, str, int]], progress: bool
) -> dict[str, Any]:
    """The same typing and probes against llama.vim's behaviour on llama-server with the same GGUF."""
    from bench.llama_peer import find_llama_server
    from bench.llama_vim_client import LlamaVimClient, start_llama_vim_server

    binary = find_llama_server()
    if binary is None:
        raise RuntimeError(
            "--peer llama-server: no llama-server binary (scripts/build_llama_server.sh builds it)"
        )
    gguf = peer_gguf(config)
    threads = config.threads or os.cpu_count() or 1  # as many as `specls serve` takes for a 0.5B+ model
    log = Path(tempfile.gettempdir()) / f"specls-bench-keystrokes-{config.tag}-llama-server.log"
    server = await asyncio.to_thread(start_llama_vim_server, binary, gguf, threads, log)
    client = LlamaVimClient(server.url)
    load_before = os.getloadavg()
    try:
        opened = await probe_opening(client, probes, config)
        typed = await type_regions(lambda region: client.editor(), regions, config, progress)
    finally:
        client.shutdown()
        await asyncio.to_thread(server.stop)
    summary = row_measures(typed, opened)
    summary["client"] = client.report()
    return {
        "client": "llama.vim-style (bench/llama_vim_client.py)",
        "server_command": [str(part) for part in server.process.args],  # type: ignore[union-attr]
        "weight_repacking": server.repack,
        "gguf": str(gguf),
        "threads": threads,
        "server_log": str(log),
        "cpu_class": native_cpu_class(),
        "load_average": {"start": load_before[0], "end": os.getloadavg()[0], "cpus": os.cpu_count()},
        "summary": summary,
        "probes": [asdict(probe) for probe in opened],
        "keystrokes": keystroke_records(typed),
    }


def server_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The server's counters over the run (after - before)."""

    def delta(name: str) -> int:
        return int(after.get("engine_totals", {}).get(name, 0)) - int(
            before.get("engine_totals", {}).get(name, 0)
        )

    def counted(name: str) -> int:
        return int(after.get(name, 0)) - int(before.get(name, 0))

    requests = counted("requests")
    prompt_tokens = delta("prompt_tokens")
    cancel_idle = after.get("cancel_to_idle_ms", [])[len(before.get("cancel_to_idle_ms", [])) :]
    empty_before = dict(before.get("empty_reasons") or [])
    empty = {
        str(reason): int(count) - int(empty_before.get(reason, 0))
        for reason, count in after.get("empty_reasons") or []
        if int(count) - int(empty_before.get(reason, 0))
    }
    return {
        "requests": requests,
        "answered_empty": counted("answered_empty"),
        "empty_reasons": dict(sorted(empty.items(), key=lambda item: -item[1])),
        "generations": counted("generations"),
        "cancelled_generations": counted("cancelled_generations"),
        "typed_ahead_hits": counted("typed_ahead_hits"),
        "typed_ahead_hit_rate": counted("typed_ahead_hits") / requests if requests else None,
        "cache_hits": counted("cache_hits"),
        "prefetches": counted("prefetches"),
        "prefetch_hits": counted("prefetch_hits"),
        "kv_prefix_reuse": delta("reused_prompt_tokens") / prompt_tokens if prompt_tokens else None,
        "prompt_tokens": prompt_tokens,
        "generated_tokens": delta("new_tokens"),
        "respelled_tokens": delta("forced_tokens"),  # token healing: typed text generated again
        "target_forwards": delta("target_forwards"),
        "cancel_to_idle_ms": {f"p{p}": percentile(cancel_idle, p) for p in (50, 95, 99)}
        | {"count": len(cancel_idle), "max": max(cancel_idle) if cancel_idle else None},
        "peak_rss_mb": after.get("peak_rss_mb"),
    }


def wasted_tokens(
    config: KeystrokeConfig, typed: list[tuple[Region, list[Any]]], generated: int, respelled: int = 0
) -> dict[str, Any] | None:
    """Generated tokens whose text never appeared in a suggestion; needs the local model's tokenizer.

    Tokens that re-spelled the typed word at the cursor (token healing) are never shown by design: they are
    counted apart, not as waste."""
    if config.backend != "local":
        return None
    from transformers import AutoTokenizer

    from engine.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(config.target, "target").location)
    shown: dict[str, str] = {}  # per generation, the longest text of it that a suggestion displayed
    for region, events in typed:
        for event in events:
            if event.outcome != "suggestion" or not event.suggestion_id:
                continue
            generation, _, typed_into = event.suggestion_id.partition("+")  # "<generation>+<chars typed>"
            already = int(typed_into) if typed_into.isdigit() else 0
            text = region.text[event.offset - already : event.offset] + event.suggestion
            key = f"{region.name}:{generation}"
            if len(text) > len(shown.get(key, "")):
                shown[key] = text
    shown_tokens = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in shown.values())
    wasted = max(0, generated - respelled - shown_tokens)
    return {
        "generated": generated,
        "shown_estimate": shown_tokens,
        "respelled": respelled,
        "wasted_estimate": wasted,
        "wasted_fraction": wasted / generated if generated else None,
    }


def run_keystrokes(config: KeystrokeConfig, progress: bool = True) -> dict[str, Any]:
    return asyncio.run(run_keystrokes_async(config, progress))


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"keystrokes-{tag}", result, markdown_report(result), plot_cdf)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _met(value: float | None, goal: float, higher: bool = True) -> str:
    if value is None:
        return "not measured"
    return "met" if (value >= goal if higher else value <= goal) else "not met"


def served_note(served: dict[str, Any] | None) -> str:
    """The replayed server's code, as `lsp_server.typist.client.served_code` found it (older results lack it)."""
    if not served:
        return ""
    if served["commit"] is None:
        return f" Server code: {served['root']} (not a git checkout)."
    changes = ", with uncommitted changes" if served["uncommitted_changes"] else ""
    return f" Server code: {served['root']} at {served['commit']}{changes}."


def markdown_report(result: dict[str, Any]) -> str:
    s, config = result["summary"], result["config"]
    server = s["server"]
    answer, shown, idle = s["answer_latency_ms"], s["suggestion_latency_ms"], server["cancel_to_idle_ms"]
    probes = s["open_to_first_suggestion_ms"]
    cold = probes.get("0s", {})
    paused = probes.get(f"{config['probe_pause_s']:g}s", {})
    wasted = s.get("wasted_tokens")
    reasons = ", ".join(f"{k}: {v}" for k, v in server["empty_reasons"].items()) or "-"
    lines = [
        f"# Keystroke replay ({config['tag']})\n",
        f"{result['date_utc']}; backend `{config['backend']}`"
        f"{'; target ' + config['target'] if config.get('target') else ''}; {len(result['regions'])} files, "
        f"{s['chars_typed']} characters, {s['key_presses']} key presses ({s['accept_keys']} of them Tab / "
        f"accept-line) at {config['pace_ms']:.0f} ms a key, +{config['line_pause_ms']:.0f} ms after Enter, "
        f"seed {config['seed']}; the client behaves like VS Code (cancels superseded requests, keeps ghost "
        "text the typing agrees with). Machine load average (1 min) "
        f"{result['load_average']['start']:.1f} at the start, {result['load_average']['end']:.1f} at the end, "
        f"{result['load_average']['cpus']} CPUs.{served_note(result.get('served_code'))}\n",
        "| measure | value | goal |",
        "|---|---|---|",
        f"| ghost text on screen when the next key came | {_pct(s['ghost_on_screen'])} | >= 70% "
        f"({_met(s['ghost_on_screen'], 0.7)}) |",
        f"| ... and the key agreed with it | {_pct(s['ghost_right'])} | |",
        f"| characters saved by Tab / accept-line | {_pct(s['chars_saved'])} ({s['chars_accepted']} accepted "
        f"with {s['accept_keys']} keys) | >= 25% ({_met(s['chars_saved'], 0.25)}) |",
        # An answer may be empty (the gate hid a doubtful line): its time says the answer was ready, not that
        # anything was shown, so the row is named for answers and says how many held a suggestion.
        f"| first answer right after opening (~2,000-token file, line start) p50 / max | "
        f"{_ms(cold.get('p50'))} / {_ms(cold.get('p99'))} ({cold.get('count', 0)} files, "
        f"{_pct(cold.get('with_suggestion'))} with a suggestion) | <= 1500 ms "
        f"({_met(cold.get('p50'), 1500, False)}) |",
        f"| ... after a {config['probe_pause_s']:g} s pause p50 / max | {_ms(paused.get('p50'))} / "
        f"{_ms(paused.get('p99'))} ({paused.get('count', 0)} files, {_pct(paused.get('with_suggestion'))} "
        f"with a suggestion) | <= 300 ms ({_met(paused.get('p50'), 300, False)}) |",
        f"| key press -> answer p50 / p95 / p99 (not overtaken by the next key) | {_ms(answer['p50'])} / "
        f"{_ms(answer['p95'])} / {_ms(answer['p99'])} ({answer['count']}) | |",
        f"| key press -> suggestion p50 / p95 / p99 | {_ms(shown['p50'])} / {_ms(shown['p95'])} / "
        f"{_ms(shown['p99'])} ({shown['count']}) | |",
        f"| outcomes (client) | {', '.join(f'{k}: {v}' for k, v in s['outcomes'].items())} | every request "
        f"answered |",
        f"| why the server answered empty | {reasons} | |",
        f"| cancel -> engine idle p50 / p95 / max | {_ms(idle['p50'])} / {_ms(idle['p95'])} / {_ms(idle['max'])}"
        f" ({idle['count']} cancels) | p95 < 20 ms ({_met(idle['p95'], 20, False)}) |",
        f"| typed-ahead hit rate (requests served from a running or finished generation) | "
        f"{_pct(server['typed_ahead_hit_rate'])} | |",
        f"| answered from the suggestion cache / prefetches run / answered from a prefetch | "
        f"{server.get('cache_hits', 0)} / {server.get('prefetches', 0)} / {server.get('prefetch_hits', 0)} | |",
        f"| KV prefix reuse (prompt tokens not recomputed) | {_pct(server['kv_prefix_reuse'])} | |",
        f"| `specls serve` peak resident memory (RSS) | {_mb(server.get('peak_rss_mb'))} | |",
        f"| generations / cancelled | {server['generations']} / {server['cancelled_generations']} | |",
        f"| generated tokens / re-spelling the typed word (token healing) / wasted (never shown, estimate) | "
        f"{server['generated_tokens']} / {server.get('respelled_tokens', 0)} / "
        f"{wasted['wasted_estimate'] if wasted else '-'} ({_pct(wasted['wasted_fraction']) if wasted else '-'}) | |",
    ]
    return "\n".join(lines + peer_report(result)) + "\n"


def _latency(measure: dict[str, Any]) -> str:
    return f"{_ms(measure['p50'])} / {_ms(measure['p95'])} ({measure['count']})"


def _probe(probes: dict[str, Any], pause: str) -> str:
    found = probes.get(pause)
    if not found:
        return "not measured"
    return (
        f"{_ms(found.get('p50'))} / {_ms(found.get('p99'))} ({found.get('count', 0)} files, "
        f"{_pct(found.get('with_suggestion'))} with a suggestion)"
    )


def peer_report(result: dict[str, Any]) -> list[str]:
    """The rows side by side: every measure of the user's view, for `specls serve` and each peer."""
    peers = result.get("peers") or {}
    if not peers:
        return []
    config, ours = result["config"], result["summary"]
    rows = [("specls serve (VS Code-style client)", ours, result.get("cpu_class", "-"))] + [
        (f"llama.vim-style client on {name}", peer["summary"], peer["cpu_class"])
        for name, peer in peers.items()
    ]
    pause = f"{config['probe_pause_s']:g}s"

    def line(label: str, cells: list[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    out = [
        "\n## Side by side: the same typist, the same keys, in one run\n",
        line("measure", [name for name, _, _ in rows]),
        "|---|" + "---|" * len(rows),
        line("CPU class", [cpu for _, _, cpu in rows]),
        line("ghost text on screen when the next key came", [_pct(s["ghost_on_screen"]) for _, s, _ in rows]),
        line("... and the key agreed with it", [_pct(s["ghost_right"]) for _, s, _ in rows]),
        line(
            "characters saved by Tab / accept-line",
            [
                f"{_pct(s['chars_saved'])} ({s['chars_accepted']} with {s['accept_keys']} keys)"
                for _, s, _ in rows
            ],
        ),
        line(
            "first answer right after opening p50 / max",
            [_probe(s["open_to_first_suggestion_ms"], "0s") for _, s, _ in rows],
        ),
        line(
            f"... after a {pause} pause p50 / max",
            [_probe(s["open_to_first_suggestion_ms"], pause) for _, s, _ in rows],
        ),
        line(
            "key press -> answer p50 / p95 (not overtaken)",
            [_latency(s["answer_latency_ms"]) for _, s, _ in rows],
        ),
        line("key press -> suggestion p50 / p95", [_latency(s["suggestion_latency_ms"]) for _, s, _ in rows]),
        line(
            "outcomes per key press",
            [", ".join(f"{k}: {v}" for k, v in s["outcomes"].items()) for _, s, _ in rows],
        ),
    ]
    server = ours["server"]
    clients = [peer["summary"]["client"] for peer in peers.values()]
    out += [
        line(
            "requests to the model server (speculative among them)",
            [f"{server['requests']} (-)"]
            + [f"{c['requests']} ({c['speculative_requests']})" for c in clients],
        ),
        line(
            "suggestions from the client's own cache (same context / look-back)",
            ["-"] + [f"{c['shown_exact']} / {c['shown_look_back']}" for c in clients],
        ),
        line(
            "prompt tokens computed / generated tokens",
            [
                f"{server['prompt_tokens'] - round((server['kv_prefix_reuse'] or 0) * server['prompt_tokens'])} / "
                f"{server['generated_tokens']}"
            ]
            + [f"{c['prompt_tokens']} / {c['generated_tokens']}" for c in clients],
        ),
        line(
            "request round trip p50 / p95",
            ["-"] + [f"{_ms(c['round_trip_ms']['p50'])} / {_ms(c['round_trip_ms']['p95'])}" for c in clients],
        ),
    ]
    for name, peer in peers.items():
        client = peer["summary"]["client"]
        out.append(
            f"\n{name}: `{' '.join(peer['server_command'][1:])}` ({peer['threads']} threads, weight repacking "
            f"{'on' if peer['weight_repacking'] else 'off'}); prompt {client['prompt_tokens_per_s'] or 0:.0f} "
            f"tokens/s, generation {client['generated_tokens_per_s'] or 0:.0f} tokens/s by its own timings; "
            f"{client['failures']} failed requests; {client['indent_changed']} suggestions shown whose accept "
            f"would have shortened the line's indentation (not counted as ghost text). Load average (1 min) "
            f"{peer['load_average']['start']:.1f} at its start, {peer['load_average']['end']:.1f} at its end."
        )
    variables = result.get("cpu_environment") or {}
    if variables:
        settings = " ".join(f"{k}={v}" for k, v in variables.items())
        out.append(
            f"\nThe CPU class was lowered for torch, oneDNN, MKL and fbgemm (`{settings}`): `specls serve` ran "
            "that class. llama-server has no such switch: it picks its kernels from the CPU's own flags, so its "
            "row ran this CPU's full instruction set and is flattered."
        )
    out.append(
        "\nThe llama.vim-style client (bench/llama_vim_client.py) sends llama.vim's `/infill` requests (lines "
        "above as `input_prefix`, the line up to the cursor as `prompt`, the rest below as `input_suffix`), one "
        "at a time (a key press during a request retries 100 ms later), keeps llama.vim's answer cache with the "
        "128-character look-back, asks speculatively as if a shown suggestion were accepted, and drops what "
        "llama.vim drops. Left out: the ring buffer of extra chunks (`input_extra` is empty; llama.vim fills it "
        "only after the cursor rests 3 s). Its latencies count a suggestion shown from its cache as answered "
        "at once."
    )
    return out


def plot_cdf(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = result["keystrokes"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, outcomes in (
        ("key press -> suggestion", ("suggestion",)),
        ("key press -> any answer", ("suggestion", "empty")),
    ):
        values = sorted(
            k["latency_ms"]
            for k in keys
            if k["outcome"] in outcomes and k["latency_ms"] is not None and not k["superseded"]
        )
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=label)
    for name, peer in (result.get("peers") or {}).items():
        values = sorted(
            k["latency_ms"]
            for k in peer["keystrokes"]
            if k["outcome"] == "suggestion" and k["latency_ms"] is not None and not k["superseded"]
        )
        if values:
            ax.step(
                [max(v, 0.1) for v in values],  # answers from the client's cache come in ~0 ms
                [(i + 1) / len(values) for i in range(len(values))],
                where="post",
                linestyle=":",
                label=f"{name} (llama.vim-style): key press -> suggestion",
            )
    pace = result["config"]["pace_ms"]
    ax.axvline(pace, color="#c44e52", linestyle="--", linewidth=1, label=f"next key ({pace:.0f} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"specls keystroke replay, backend {result['config']['backend']}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
