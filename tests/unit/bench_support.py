"""A tiny saved target/draft pair with the bundled tokenizer's special tokens, for the benchmark tests.

The draft shares the target's embeddings and first layer, so it agrees with the target often enough for
speculation to accept some drafts; the models are random otherwise (no speed claims come from them).
"""

from __future__ import annotations

from pathlib import Path

WINDOW = 1024
CODE = [
    "def add(a, b):\n    return a + b\n\n",
    "for index in range(10):\n    print(index, index * index)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
]


def save_tiny_pair(root: Path, vocab_size: int = 400) -> tuple[Path, Path]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

    settings = tokenizer_config(WINDOW)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_code_tokenizer(CODE * 20, vocab_size=vocab_size),
        bos_token=settings["bos_token"],
        eos_token=settings["eos_token"],
        pad_token=settings["pad_token"],
        additional_special_tokens=settings["additional_special_tokens"],
    )

    def config(layers: int) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=WINDOW,
            initializer_range=0.2,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.eos_token_id,
        )

    torch.manual_seed(0)
    target = LlamaForCausalLM(config(2))
    draft = LlamaForCausalLM(config(1))
    own = draft.state_dict()
    # The draft is the target with its second layer removed: same embeddings, head and first layer.
    draft.load_state_dict({name: value for name, value in target.state_dict().items() if name in own})
    folders = []
    for name, model in (("target", target), ("draft", draft)):
        folder = root / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(folder)
    return folders[0], folders[1]
