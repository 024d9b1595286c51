"""NSMC as the general scripts read it: the training reviews less a held-out validation split, and the test
reviews, written as JSON lines (``id``, ``text``, ``label`` as ``negative`` / ``positive``).

    python -m recipes.nsmc.prepare --data_dir ../shared/data --output_dir runs/nsmc-data

The validation reviews are carved from ``ratings_train.txt`` with a fixed seed, so the 50,000 test reviews are never
used for choosing anything, and pretraining on ``train.jsonl`` never reads a review the classifier is validated on
(as reviews, by id: NSMC's files repeat some short texts, such as "최악.", as reviews of their own, so a few
validation and test texts also stand in the training file). Quotes are decoded and empty reviews dropped (counted in
a log line) by :func:`recipes.nsmc.data.load_nsmc`.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from hf_transformer.commands import run_command
from recipes.nsmc.data import load_nsmc

SPLITS = ("train", "validation", "test")


def write_splits(data_dir: str | None, output_dir: Path, *, validation_size: float, seed: int) -> dict[str, int]:
    """Writes ``output_dir/{train,validation,test}.jsonl``; returns the rows of each."""
    splits = load_nsmc(data_dir, validation_size=validation_size, seed=seed)
    output_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in SPLITS:
        rows = splits[split]
        names = rows.features["label"].names
        columns = rows.select_columns(["id", "text", "label"]).to_dict()  # read at once, not row by row
        lines = [
            json.dumps({"id": id_, "text": text, "label": names[label]}, ensure_ascii=False)
            for id_, text, label in zip(columns["id"], columns["text"], columns["label"], strict=True)
        ]
        (output_dir / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts[split] = len(lines)
    return counts


def share_or_count(text: str) -> float | int:
    """--validation_size: a share of the training file in (0, 1), or a count of reviews (a whole number, 1 or more)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a share in (0, 1) nor a count of reviews") from None
    if 0 < value < 1:
        return value
    if value >= 1 and value.is_integer():
        return int(value)
    raise argparse.ArgumentTypeError(f"{text} is neither a share in (0, 1) nor a count of reviews (1 or more)")


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m recipes.nsmc.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", help="folder holding nsmc/ (else $HF_TRANSFORMER_DATA, else ./data)")
    parser.add_argument("--output_dir", type=Path, required=True, help="where the .jsonl files go")
    parser.add_argument(
        "--validation_size", type=share_or_count, default=0.1, help="share of the training file held out, or a count"
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the held-out split")
    return parser


def main(argv: list[str] | None = None) -> dict[str, int]:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    counts = write_splits(args.data_dir, args.output_dir, validation_size=args.validation_size, seed=args.seed)
    print(f"NSMC reviews written to {args.output_dir}: {counts}")
    return counts


if __name__ == "__main__":
    run_command(main, prog=argument_parser().prog)
