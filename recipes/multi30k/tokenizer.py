"""The shared tokenizer of the Multi30k ensemble's members, trained once before them:

    python -m recipes.multi30k.tokenizer --data_dir ../shared/data --output runs/m30k-en-de-ensemble/tokenizer

It is trained on Multi30k's training pairs, each pair's English sentence then its German one (the same texts in the
same order for either direction, so one tokenizer serves both), and saved as a tokenizer folder that
`python -m recipes.multi30k.train --tokenizer FOLDER` loads. Defaults: Unigram, 8,000 pieces, model_max_length 128.
"""

from __future__ import annotations

import argparse
import logging

from hf_transformer.commands import run_command
from hf_transformer.tokenization import train_tokenizer
from hf_transformer.tokenization.train import MODEL_TYPES
from recipes.multi30k.data import load_multi30k

logger = logging.getLogger("recipes.multi30k.tokenizer")


def training_texts(data_dir: str | None) -> list[str]:
    """Every training pair's English sentence, then its German one."""
    pairs = load_multi30k(data_dir, source_lang="en", target_lang="de")["train"]["translation"]
    return [text for pair in pairs for text in (pair["en"], pair["de"])]


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", help="folder holding multi30k/ (else $HF_TRANSFORMER_DATA, else ./data)")
    parser.add_argument("--output", required=True, help="folder to save the tokenizer to")
    parser.add_argument("--vocab_size", type=int, default=8000, help="whole vocabulary, special tokens included")
    parser.add_argument("--model", choices=MODEL_TYPES, default="unigram")
    parser.add_argument("--model_max_length", type=int, default=128)
    parser.add_argument("--lowercase", action="store_true", help="the tokenizer lowercases every text it encodes")
    return parser


def main(argv: list[str] | None = None):
    args = argument_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    texts = training_texts(args.data_dir)
    tokenizer = train_tokenizer(
        texts,
        args.vocab_size,
        model_type=args.model,
        model_max_length=args.model_max_length,
        lowercase=args.lowercase,
        show_progress=False,
        save_directory=args.output,
    )
    logger.info(
        "a %s vocabulary of %d pieces from %d texts; saved to %s", args.model, len(tokenizer), len(texts), args.output
    )
    return tokenizer


if __name__ == "__main__":
    run_command(main)
