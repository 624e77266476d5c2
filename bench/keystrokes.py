"""`specls bench keystrokes`: what a person typing real files gets from `specls serve`.

The client is the demo's replay (`lsp_server.app.demo.replay.Replay`), which drives the server over stdio the way
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.metrics import percentile, write_result_files

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


@dataclass
class Region:
    name: str
    text: str  # the whole file as it will be once typed
    start: int  # where typing starts
    end: int  # where it stops


def cadence_of(config: KeystrokeConfig) -> Any:
    from lsp_server.app.demo.keystrokes import Cadence

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
    return args + ["--log-file", str(log_file), "--log-level", "WARNING"]


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


async def run_keystrokes_async(config: KeystrokeConfig, progress: bool = True) -> dict[str, Any]:
    from tqdm import tqdm

    from lsp_server.app.demo.client import ServerSession
    from lsp_server.app.demo.measures import OpenProbe, Typed, probe_after_open
    from lsp_server.app.demo.replay import KeyEvent, Replay

    regions = default_regions(config)
    if not regions:
        raise RuntimeError("no files to replay")
    probes = probe_files(config, skip=len(regions)) if not config.files and config.probes else []
    config.out.mkdir(parents=True, exist_ok=True)
    log_file = Path(tempfile.gettempdir()) / f"specls-bench-keystrokes-{config.tag}.log"  # warnings only
    session = ServerSession("specls-bench")
    rng = random.Random(config.seed)
    load_before = os.getloadavg()
    typed: list[tuple[Region, list[KeyEvent]]] = []
    opened: list[OpenProbe] = []
    try:
        env = {"OMP_NUM_THREADS": str(config.threads)} if config.threads else {}
        await session.start(
            serve_args(config, log_file), env=env, initialization_options=config.settings or None
        )
        await session.wait_ready(config.timeout_s)
        before = await session.stats()
        for number, (name, text, offset) in enumerate(probes):
            pause = config.probe_pause_s if number % 2 else 0.0
            uri = f"{URI_ROOT}/probe/{number}/{name.lstrip('/')}"
            opened.append(await probe_after_open(session, name, uri, text, offset, "python", pause))
        total = sum(len(r.text[r.start : r.end]) for r in regions)
        with tqdm(total=total, desc="characters", unit="char", disable=not progress) as bar:
            for region in regions:
                replay = Replay(
                    session,
                    region.text,
                    f"{URI_ROOT}/{region.name.lstrip('/')}",
                    "python",
                    cadence_of(config),
                    start=region.start,
                    end=region.end,
                    rng=rng,
                    accept=config.accept,
                    poll_stats=False,
                )
                events = await replay.run()
                bar.update(region.end - region.start)
                typed.append((region, events))
        await asyncio.sleep(0.5)  # let the last cancel->idle record arrive
        after = await session.stats()
    finally:
        await session.stop()
    from lsp_server.app.demo.measures import probe_measures, user_measures

    summary = user_measures([Typed(events, region.end - region.start) for region, events in typed])
    summary["open_to_first_suggestion_ms"] = probe_measures(opened)
    summary["server"] = server_deltas(before, after)
    summary["wasted_tokens"] = wasted_tokens(
        config, typed, summary["server"]["generated_tokens"], summary["server"]["respelled_tokens"]
    )
    return {
        "benchmark": "keystrokes",
        "config": {**asdict(config), "out": str(config.out), "files": [str(p) for p in config.files]},
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # The machine's 1-minute load average when the run started and ended (what else was running).
        "load_average": {"start": load_before[0], "end": os.getloadavg()[0], "cpus": os.cpu_count()},
        "regions": [{"name": r.name, "start": r.start, "chars": r.end - r.start} for r in regions],
        "server_log": str(log_file),
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
        "keystrokes": [
            asdict(event) | {"file": region.name, "latency_ms": event.latency_ms}
            for region, events in typed
            for event in events
        ],
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
        f"{result['load_average']['cpus']} CPUs.\n",
        "| measure | value | goal |",
        "|---|---|---|",
        f"| ghost text on screen when the next key came | {_pct(s['ghost_on_screen'])} | >= 70% "
        f"({_met(s['ghost_on_screen'], 0.7)}) |",
        f"| ... and the key agreed with it | {_pct(s['ghost_right'])} | |",
        f"| characters saved by Tab / accept-line | {_pct(s['chars_saved'])} ({s['chars_accepted']} accepted "
        f"with {s['accept_keys']} keys) | >= 25% ({_met(s['chars_saved'], 0.25)}) |",
        f"| first suggestion right after opening (~2,000-token file, line start) p50 / max | "
        f"{_ms(cold.get('p50'))} / {_ms(cold.get('p99'))} ({cold.get('count', 0)} files, "
        f"{_pct(cold.get('with_suggestion'))} non-empty) | <= 1500 ms ({_met(cold.get('p50'), 1500, False)}) |",
        f"| ... after a {config['probe_pause_s']:g} s pause p50 / max | {_ms(paused.get('p50'))} / "
        f"{_ms(paused.get('p99'))} ({paused.get('count', 0)} files, {_pct(paused.get('with_suggestion'))} "
        f"non-empty) | <= 300 ms ({_met(paused.get('p50'), 300, False)}) |",
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
    return "\n".join(lines) + "\n"


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
