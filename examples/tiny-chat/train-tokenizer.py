"""Trains the tiny example model's tokenizer (examples/tiny-chat/tokenizer.json).

A byte-level BPE in the style of GPT-2 and Qwen2 (the same pre-tokenizer split pattern as
Qwen2), 512 ids, trained with Hugging Face `tokenizers` on the project's own documentation,
with the ChatML special tokens. Run from the repository root:

    build/venv/bin/python examples/tiny-chat/train-tokenizer.py

The output is committed, so building the examples needs no Python.
"""

import glob
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    corpus = sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + [
        os.path.join(root, "README.md")
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(corpus, trainer)
    tok.save(os.path.join(here, "tokenizer.json"))


if __name__ == "__main__":
    main()
