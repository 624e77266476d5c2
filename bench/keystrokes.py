"""`specls bench keystrokes`: replay typing real files through `specls serve` over stdio, as an editor does.

The client is pygls's `LanguageClient` talking JSON-RPC to a `specls serve` subprocess. For each file a
region of `--chars` characters is cut out (by default from held-out stdlib files, at the cursor rule of
`bench.prompts`) and typed back one keystroke at a time at the cursor: an incremental `didChange`, then a
`textDocument/inlineCompletion` request; the previous request, if still unanswered, is cancelled with
`$/cancelRequest` first (what VS Code does on every keystroke). A newline and the indentation after it are
one keystroke (editors auto-indent). Cadence: uniform 60-120 ms between keystrokes, plus a 300-900 ms pause
after each line end; seeded, so runs replay the same typing.

Measured on the client: keystroke -> answer and keystroke -> non-empty suggestion latency, how often the
text typed next matched the suggestion. Read from the server's `specls/stats`: typed-ahead hits, KV prefix
reuse, tokens generated, and cancel -> engine idle (the engine's own clock from a cancel to the worker
being free again).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.metrics import percentile, write_result_files
from engine.sequences import common_prefix_length

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
    min_gap_ms: float = 60
    max_gap_ms: float = 120
    line_pause_ms: tuple[float, float] = (300, 900)
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


@dataclass
class Keystroke:
    file: str
    index: int  # keystroke number within the file
    offset: int  # cursor after the keystroke, in the final text
    typed: str
    sent_at: float
    answered_at: float | None = None
    outcome: str = "pending"  # "suggestion" | "empty" | "cancelled" | "error" | "pending"
    suggestion: str = ""
    suggestion_id: str = ""
    matched_chars: int = 0  # how much of the suggestion the user typed next
    generation_text: str = ""  # the generation's text up to the end of this suggestion (typed-ahead + shown)

    @property
    def latency_ms(self) -> float | None:
        return None if self.answered_at is None else (self.answered_at - self.sent_at) * 1000


def keystrokes_of(text: str) -> list[str]:
    """Split typed text into keystrokes: one character each, except a newline takes its indentation along."""
    strokes: list[str] = []
    index = 0
    while index < len(text):
        if text[index] == "\n":
            end = index + 1
            while end < len(text) and text[end] in " \t":
                end += 1
            strokes.append(text[index:end])
            index = end
        else:
            strokes.append(text[index])
            index += 1
    return strokes


def gap_after(stroke: str, rng: random.Random, config: KeystrokeConfig) -> float:
    """Seconds to wait after a keystroke: 60-120 ms, plus a pause at a line end."""
    gap = rng.uniform(config.min_gap_ms, config.max_gap_ms)
    if stroke.startswith("\n"):
        gap += rng.uniform(*config.line_pause_ms)
    return gap / 1000


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


class ReplayClient:
    """An editor stand-in: one document at a time, requests on every keystroke, cancelling the previous one.
    The LSP client is the demo's `ServerSession`; this class adds the timing of every answer."""

    def __init__(self, config: KeystrokeConfig) -> None:
        from lsp_server.demo.client import ServerSession

        self.config = config
        self.session = ServerSession("specls-bench")

    @property
    def statuses(self) -> list[dict[str, Any]]:
        return self.session.statuses

    @property
    def messages(self) -> list[str]:
        return list(self.session.messages)

    async def start(self, log_file: Path) -> None:
        env = {"OMP_NUM_THREADS": str(self.config.threads)} if self.config.threads else {}
        await self.session.start(
            serve_args(self.config, log_file),
            env=env,
            initialization_options=self.config.settings or None,
        )
        await self.session.wait_ready(self.config.timeout_s)

    async def stats(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.session.stats(), 30)

    async def stop(self) -> None:
        await self.session.stop()

    async def replay(self, region: Region, rng: random.Random, on_key: Any = None) -> list[Keystroke]:
        uri = f"{URI_ROOT}/{region.name.lstrip('/')}"
        final = region.text
        self.session.open(uri, final[: region.start] + final[region.end :], "python")
        cursor = region.start  # in both the document and `final`: the text before it is the same
        pending: tuple[str, asyncio.Future[Any]] | None = None
        keys: list[Keystroke] = []
        for index, stroke in enumerate(keystrokes_of(final[region.start : region.end])):
            if pending is not None and not pending[1].done():
                self.session.cancel(pending[0])
            self.session.insert(uri, cursor, stroke)
            cursor += len(stroke)
            key = Keystroke(region.name, index, cursor, stroke, time.monotonic())
            pending = self.session.request_inline(uri, cursor)
            pending[1].add_done_callback(functools.partial(_record_answer, key, final, cursor))
            keys.append(key)
            if on_key is not None:
                on_key()
            await asyncio.sleep(gap_after(stroke, rng, self.config))
        if pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(pending[1]), self.config.timeout_s)
        self.session.close(uri)
        return keys


def _record_answer(key: Keystroke, final: str, cursor: int, answer: asyncio.Future[Any]) -> None:
    """Fill in `key` from its request's answer; `final` is the text once typed, `cursor` where the key left it."""
    from lsp_server.demo.client import first_suggestion

    key.answered_at = time.monotonic()
    if answer.cancelled() or answer.exception() is not None:
        error = "" if answer.cancelled() else str(answer.exception())
        key.outcome = "cancelled" if answer.cancelled() or "cancel" in error.lower() else "error"
        key.answered_at = None if key.outcome == "cancelled" else key.answered_at
        return
    text, suggestion_id = first_suggestion(answer.result())
    if not text:
        key.outcome = "empty"
        return
    key.outcome = "suggestion"
    key.suggestion, key.suggestion_id = text, suggestion_id or ""
    key.matched_chars = common_prefix_length(key.suggestion, final[cursor:])
    typed_into = key.suggestion_id.partition("+")[2]  # "<generation>+<chars typed since its cursor>"
    already = int(typed_into) if typed_into.isdigit() else 0
    key.generation_text = final[cursor - already : cursor] + key.suggestion


def summarize(keys: list[Keystroke], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Client-side latencies and matches, and the server's counters over the run (after - before)."""
    answered = [
        k.latency_ms for k in keys if k.outcome in ("suggestion", "empty") and k.latency_ms is not None
    ]
    suggested = [k for k in keys if k.outcome == "suggestion"]
    latency = [k.latency_ms for k in suggested if k.latency_ms is not None]

    def pcts(values: list[float]) -> dict[str, float | None]:
        return {f"p{p}": percentile(values, p) for p in (50, 95, 99)} | {"count": len(values)}

    # Every keystroke, a cancelled request counting as "no suggestion before the next keystroke" (infinite):
    # percentiles over answered requests alone would hide the slow ones that typing overtook.
    every = [
        k.latency_ms if k.outcome == "suggestion" and k.latency_ms is not None else math.inf for k in keys
    ]
    outcomes: dict[str, int] = {}
    for key in keys:
        outcomes[key.outcome] = outcomes.get(key.outcome, 0) + 1

    def delta(name: str) -> int:
        return int(after.get("engine_totals", {}).get(name, 0)) - int(
            before.get("engine_totals", {}).get(name, 0)
        )

    requests = after.get("requests", 0) - before.get("requests", 0)
    prompt_tokens = delta("prompt_tokens")
    cancel_idle = after.get("cancel_to_idle_ms", [])[len(before.get("cancel_to_idle_ms", [])) :]
    return {
        "keystrokes": len(keys),
        "outcomes": outcomes,
        "keystroke_to_suggestion_ms": pcts(latency),
        "keystroke_to_answer_ms": pcts(answered),
        # None where the percentile falls on keystrokes that never got a suggestion in time.
        "keystroke_to_suggestion_all_keystrokes_ms": {
            name: None if value is None or math.isinf(value) else value for name, value in pcts(every).items()
        },
        "suggestion_before_next_keystroke": len(suggested) / len(keys) if keys else None,
        "typed_next_matched_suggestion": {
            "exact": sum(k.matched_chars == len(k.suggestion) for k in suggested) / len(suggested)
            if suggested
            else None,
            "first_char": sum(k.matched_chars > 0 for k in suggested) / len(suggested) if suggested else None,
            "mean_fraction": sum(k.matched_chars / len(k.suggestion) for k in suggested) / len(suggested)
            if suggested
            else None,
        },
        "server": {
            "requests": requests,
            "generations": after.get("generations", 0) - before.get("generations", 0),
            "cancelled_generations": after.get("cancelled_generations", 0)
            - before.get("cancelled_generations", 0),
            "typed_ahead_hits": after.get("typed_ahead_hits", 0) - before.get("typed_ahead_hits", 0),
            "typed_ahead_hit_rate": (after.get("typed_ahead_hits", 0) - before.get("typed_ahead_hits", 0))
            / requests
            if requests
            else None,
            "kv_prefix_reuse": delta("reused_prompt_tokens") / prompt_tokens if prompt_tokens else None,
            "generated_tokens": delta("new_tokens"),
            "respelled_tokens": delta("forced_tokens"),  # token healing: typed text generated again
            "target_forwards": delta("target_forwards"),
            "cancel_to_idle_ms": pcts(cancel_idle) | {"max": max(cancel_idle) if cancel_idle else None},
            "peak_rss_mb": after.get("peak_rss_mb"),
        },
    }


async def run_keystrokes_async(config: KeystrokeConfig, progress: bool = True) -> dict[str, Any]:
    from tqdm import tqdm

    regions = default_regions(config)
    if not regions:
        raise RuntimeError("no files to replay")
    config.out.mkdir(parents=True, exist_ok=True)
    log_file = Path(tempfile.gettempdir()) / f"specls-bench-keystrokes-{config.tag}.log"  # warnings only
    client = ReplayClient(config)
    rng = random.Random(config.seed)
    total = sum(len(keystrokes_of(r.text[r.start : r.end])) for r in regions)
    keys: list[Keystroke] = []
    try:
        await client.start(log_file)
        before = await client.stats()
        with tqdm(total=total, desc="keystrokes", unit="key", disable=not progress) as bar:
            for region in regions:
                keys += await client.replay(region, rng, on_key=lambda: bar.update(1))
        await asyncio.sleep(0.5)  # let the last cancel->idle record arrive
        after = await client.stats()
    finally:
        await client.stop()
    summary = summarize(keys, before, after)
    summary["wasted_tokens"] = wasted_tokens(
        config, keys, summary["server"]["generated_tokens"], summary["server"]["respelled_tokens"]
    )
    return {
        "benchmark": "keystrokes",
        "config": {**asdict(config), "out": str(config.out), "files": [str(p) for p in config.files]},
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "regions": [{"name": r.name, "start": r.start, "chars": r.end - r.start} for r in regions],
        "server_log": str(log_file),
        "server_info": {
            "last_status": client.statuses[-1] if client.statuses else None,
            "messages": client.messages,
        },
        "summary": summary,
        "goals": {"p50_ms": 50, "p95_ms": 150},
        "keystrokes": [asdict(k) | {"latency_ms": k.latency_ms} for k in keys],
    }


def wasted_tokens(
    config: KeystrokeConfig, keys: list[Keystroke], generated: int, respelled: int = 0
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
    for key in keys:
        if key.outcome == "suggestion":
            generation = key.suggestion_id.partition("+")[0]
            if len(key.generation_text) > len(shown.get(generation, "")):
                shown[generation] = key.generation_text
    shown_tokens = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in shown.values())
    return {
        "generated": generated,
        "shown_estimate": shown_tokens,
        "respelled": respelled,
        "wasted_estimate": max(0, generated - respelled - shown_tokens),
        "wasted_fraction": max(0, generated - respelled - shown_tokens) / generated if generated else None,
    }


def run_keystrokes(config: KeystrokeConfig, progress: bool = True) -> dict[str, Any]:
    return asyncio.run(run_keystrokes_async(config, progress))


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"keystrokes-{tag}", result, markdown_report(result), plot_cdf)


def _ms(value: float | None, never: bool = False) -> str:
    if value is None:
        return "never" if never else "-"
    return f"{value:.1f} ms"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown_report(result: dict[str, Any]) -> str:
    s, config = result["summary"], result["config"]
    server = s["server"]
    lat, ans, idle = s["keystroke_to_suggestion_ms"], s["keystroke_to_answer_ms"], server["cancel_to_idle_ms"]
    every = s["keystroke_to_suggestion_all_keystrokes_ms"]
    matched = s["typed_next_matched_suggestion"]
    wasted = s.get("wasted_tokens")
    lines = [
        f"# Keystroke replay ({config['tag']})\n",
        f"{result['date_utc']}; backend `{config['backend']}`"
        f"{'; target ' + config['target'] if config.get('target') else ''}; {len(result['regions'])} files, "
        f"{sum(r['chars'] for r in result['regions'])} characters typed, {s['keystrokes']} keystrokes at {config['min_gap_ms']:.0f}-"
        f"{config['max_gap_ms']:.0f} ms (+{config['line_pause_ms'][0]:.0f}-{config['line_pause_ms'][1]:.0f} ms at "
        f"line ends), seed {config['seed']}.\n",
        "| measure | value | goal |",
        "|---|---|---|",
        f"| keystroke -> suggestion p50 | {_ms(lat['p50'])} | <= 50 ms |",
        f"| keystroke -> suggestion p95 | {_ms(lat['p95'])} | <= 150 ms |",
        f"| keystroke -> suggestion p99 | {_ms(lat['p99'])} | |",
        f"| keystroke -> suggestion over all keystrokes (none before the next key = never) p50 / p95 | "
        f"{_ms(every['p50'], never=True)} / {_ms(every['p95'], never=True)} | |",
        f"| keystroke -> any answer p50 / p95 / p99 | {_ms(ans['p50'])} / {_ms(ans['p95'])} / {_ms(ans['p99'])} | |",
        f"| keystrokes answered with a suggestion before the next one | "
        f"{_pct(s['suggestion_before_next_keystroke'])} | |",
        f"| outcomes | {', '.join(f'{k}: {v}' for k, v in sorted(s['outcomes'].items()))} | |",
        f"| cancel -> engine idle p50 / p95 / max | {_ms(idle['p50'])} / {_ms(idle['p95'])} / {_ms(idle['max'])}"
        f" ({idle['count']} cancels) | within one round |",
        f"| typed-ahead hit rate (requests served from a running or finished generation) | "
        f"{_pct(server['typed_ahead_hit_rate'])} | |",
        f"| KV prefix reuse (prompt tokens not recomputed) | {_pct(server['kv_prefix_reuse'])} | |",
        f"| `specls serve` peak resident memory (RSS) | {_mb(server.get('peak_rss_mb'))} | |",
        f"| generations / cancelled | {server['generations']} / {server['cancelled_generations']} | |",
        f"| generated tokens / re-spelling the typed word (token healing) / wasted (never shown, estimate) | "
        f"{server['generated_tokens']} / {server.get('respelled_tokens', 0)} / "
        f"{wasted['wasted_estimate'] if wasted else '-'} ({_pct(wasted['wasted_fraction']) if wasted else '-'}) | |",
        f"| next typed text matched the suggestion: whole / first char / mean fraction | "
        f"{_pct(matched['exact'])} / {_pct(matched['first_char'])} / {_pct(matched['mean_fraction'])} | |",
    ]
    return "\n".join(lines) + "\n"


def plot_cdf(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = result["keystrokes"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, outcomes in (
        ("keystroke -> suggestion", ("suggestion",)),
        ("keystroke -> any answer", ("suggestion", "empty")),
    ):
        values = sorted(
            k["latency_ms"] for k in keys if k["outcome"] in outcomes and k["latency_ms"] is not None
        )
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=label)
    ax.axvline(50, color="#55a868", linestyle="--", linewidth=1, label="p50 goal 50 ms")
    ax.axvline(150, color="#c44e52", linestyle="--", linewidth=1, label="p95 goal 150 ms")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"specls keystroke replay, backend {result['config']['backend']}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
