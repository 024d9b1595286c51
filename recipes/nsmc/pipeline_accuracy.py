"""The NSMC test accuracy of a saved classifier folder computed as a user would compute it: raw review text through
``transformers.pipeline("text-classification", model=FOLDER)``, set beside the accuracy its training run recorded.

    python -m recipes.nsmc.pipeline_accuracy runs/nsmc runs/nsmc-data/test.jsonl

The folder's own tokenizer does all the cutting (for a morpheme tokenizer, MeCab-ko runs inside it): no review is
segmented beforehand. Writes ``pipeline_accuracy.json`` into the folder (the accuracy, the recorded one, how many
reviews the two disagree on, reviews a second) and exits with status 1 when the two accuracies differ by more reviews
than the pipeline finds ties: reviews whose two likeliest labels are within ``TIE`` of each other, which the
pipeline's batches (padded otherwise than the run's) may break either way in the last bits of a float.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import hf_transformer  # noqa: F401  (registers the Auto classes and the morpheme tokenizer)
from hf_transformer.commands import run_command

# Two labels' probabilities closer than this are a tie (a logit margin of about 4e-5): far above float32's rounding
# of these small models' logits (about 1e-6), far below any margin a model means.
TIE = 1e-5


def read_reviews(folder: Path, test_file: Path) -> list[dict]:
    """``test_file``'s rows (JSON lines with ``text`` and ``label``), or ValueError naming what is wrong: a file
    that is not such lines, no rows, or labels the folder's model does not name (scored, they would all count wrong)."""
    lines = [line for line in test_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        rows = [json.loads(line) for line in lines]
    except json.JSONDecodeError as error:
        raise ValueError(f"{test_file}: not JSON lines ({error}); give recipes.nsmc.prepare's test.jsonl") from None
    if not rows:
        raise ValueError(f"{test_file}: no reviews in it")
    if not all(isinstance(row, dict) and {"text", "label"} <= row.keys() for row in rows):
        raise ValueError(f"{test_file}: each line must hold a review's text and label")
    names = set(json.loads((folder / "config.json").read_text(encoding="utf-8"))["id2label"].values())
    unknown = sorted({str(row["label"]) for row in rows} - names)
    if unknown:
        raise ValueError(
            f"{test_file}: labels {', '.join(unknown[:4])} are not the model's ({', '.join(sorted(names))}): "
            "another file's labels, or written otherwise than the run read them"
        )
    return rows


def pipeline_accuracy(folder: Path, rows: list[dict], batch_size: int = 256) -> dict:
    """The pipeline's predictions for every review of ``rows`` (`read_reviews`'), scored against their labels."""
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(folder), truncation=True)
    started = time.time()
    scored = classify([row["text"] for row in rows], batch_size=batch_size, top_k=None)  # every label, likeliest first
    seconds = time.time() - started
    # A folder trained on integer labels names its classes "0", "1", ... (`id2label`).
    correct = sum(labels[0]["label"] == str(row["label"]) for labels, row in zip(scored, rows))
    ties = sum(labels[0]["score"] - labels[1]["score"] < TIE for labels in scored)
    return {
        "reviews": len(rows),
        "accuracy": correct / len(rows),
        "ties": ties,
        "reviews_per_second": round(len(rows) / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.nsmc.pipeline_accuracy", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folder", type=Path, help="a classifier folder saved by scripts/train_classifier.py")
    parser.add_argument("test_file", type=Path, help="the test reviews the run scored (recipes.nsmc.prepare's)")
    parser.add_argument("--batch_size", type=int, default=256)
    args = parser.parse_args(argv)
    for path in (args.folder / "results.json", args.folder / "config.json", args.test_file):
        if not path.is_file():
            parser.error(
                f"{path}: no such file (a classifier folder saved by scripts/train_classifier.py, and its test)"
            )
    recorded = json.loads((args.folder / "results.json").read_text())
    if "test_accuracy" not in recorded:  # before classifying every review
        parser.error(f"{args.folder}/results.json holds no test_accuracy: the run was trained without --test_file")
    try:
        rows = read_reviews(args.folder, args.test_file)  # before classifying every review
    except ValueError as error:
        parser.error(str(error))
    result = pipeline_accuracy(args.folder, rows, args.batch_size)
    result["recorded_accuracy"] = recorded["test_accuracy"]
    result["reviews_apart"] = round(abs(result["accuracy"] - result["recorded_accuracy"]) * result["reviews"])
    (args.folder / "pipeline_accuracy.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"pipeline accuracy {result['accuracy']:.4f} on {result['reviews']:,} reviews; recorded "
        f"{result['recorded_accuracy']:.4f}; {result['reviews_apart']} review(s) apart, {result['ties']} tie(s); "
        f"{result['reviews_per_second']:,} reviews/s"
    )
    return 0 if result["reviews_apart"] <= result["ties"] else 1


if __name__ == "__main__":
    sys.exit(run_command(main))
