"""Byte-level BPE for code with the GPT-2 pre-tokenizer split and specls' FIM special tokens."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from engine.tokens import EOS, FILE_SEP, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, SPECIAL_TOKENS


def train_code_tokenizer(texts: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
    """Train a byte-level BPE; special tokens take the first ids so every vocab size agrees on them."""
    tokenizer = Tokenizer(models.BPE())
    # GPT-2's regex split keeps merges inside words, numbers and runs of spaces (indentation).
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def special_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a special token, or a clear error for a tokenizer that lacks it."""
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer has no {token} token; it was not trained by specls")
    return token_id


def tokenizer_config(model_max_length: int) -> dict[str, object]:
    """The tokenizer_config.json that lets transformers' AutoTokenizer load the tokenizer.json."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": None,
        "additional_special_tokens": [FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FILE_SEP],
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
