"""Speed of the tokenizer on the NSMC training text: training a vocabulary, then tokenizing every review.

Targets (2 CPU cores): training under 60 s, tokenizing all 150k reviews, batched, under 15 s.

    python -m recipes.nsmc.benchmark_tokenizer --data-dir ../shared/data
    python -m recipes.nsmc.benchmark_tokenizer --model bpe --output benchmarks/results/tokenizer-nsmc-bpe.json

Results are printed and written as JSON (default `benchmarks/results/tokenizer-nsmc.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import datasets
import tokenizers
import transformers

from hf_transformer.data import tokenize_classification
from hf_transformer.tokenization import train_tokenizer
from recipes.nsmc.data import load_nsmc

ROOT = Path(__file__).resolve().parents[2]

TRAIN_BUDGET_S = 60.0
TOKENIZE_BUDGET_S = 15.0
SEED_SENTENCES = ["겨울은 추워요.", "감기 조심하세요."]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="folder with nsmc/ (default: $HF_TRANSFORMER_DATA or ./data)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--model", choices=["unigram", "bpe"], default="unigram")
    parser.add_argument("--batch-size", type=int, default=1000, help="texts per tokenizer call")
    parser.add_argument("--repeats", type=int, default=1, help="tokenizing passes; the median is reported")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "tokenizer-nsmc.json"))
    return parser.parse_args()


def timed(function):
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def timed_with_cpu(function):
    """Wall seconds and this process's CPU seconds (all threads): on a shared machine the CPU time shows
    how much of the wall time was spent working rather than waiting for a core."""
    cpu_started = time.process_time()
    result, wall = timed(function)
    return result, wall, time.process_time() - cpu_started


def main() -> None:
    args = parse_args()
    # A fresh datasets cache: the load is timed from the files, and nothing is left behind.
    with tempfile.TemporaryDirectory(prefix="tokenizer-benchmark-") as cache:
        run(args, cache)


def run(args: argparse.Namespace, cache: str) -> None:
    nsmc, load_s = timed(lambda: load_nsmc(args.data_dir, cache_dir=cache))
    # The whole training file: the train and validation splits together (empty reviews are dropped).
    texts = list(nsmc["train"]["text"]) + list(nsmc["validation"]["text"])
    load_average_before = os.getloadavg()

    tokenizer, train_s, train_cpu_s = timed_with_cpu(
        lambda: train_tokenizer(texts, args.vocab_size, model_type=args.model, show_progress=False)
    )

    def tokenize_in_batches():
        return [
            tokenizer(texts[start : start + args.batch_size], truncation=True)["input_ids"]
            for start in range(0, len(texts), args.batch_size)
        ]

    passes = [timed_with_cpu(tokenize_in_batches) for _ in range(args.repeats)]
    tokenize_s = statistics.median(seconds for _, seconds, _ in passes)
    tokenize_cpu_s = statistics.median(cpu for _, _, cpu in passes)
    batches = passes[0][0]
    lengths = [len(ids) for batch in batches for ids in batch]
    unknown = sum(ids.count(tokenizer.unk_token_id) for batch in batches for ids in batch)

    datasets.disable_caching()  # time the map itself, not a cache hit
    _, map_s = timed(lambda: tokenize_classification(nsmc["train"], tokenizer))

    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "load_average_before_training": [round(value, 2) for value in load_average_before],
            "load_average_after": [round(value, 2) for value in os.getloadavg()],
            "python": platform.python_version(),
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
            "datasets": datasets.__version__,
        },
        "corpus": {"name": "NSMC ratings_train.txt", "texts": len(texts), "load_s": round(load_s, 2)},
        "train": {
            "model": args.model,
            "vocab_size_asked": args.vocab_size,
            "vocab_size": len(tokenizer),
            "seconds": round(train_s, 2),
            "cpu_seconds": round(train_cpu_s, 2),
            "budget_s": TRAIN_BUDGET_S,
            "within_budget": train_s < TRAIN_BUDGET_S,
        },
        "tokenize": {
            "how": f"tokenizer(list of {args.batch_size} texts, truncation=True), all texts",
            "seconds": round(tokenize_s, 2),
            "cpu_seconds": round(tokenize_cpu_s, 2),
            "repeats": args.repeats,
            "budget_s": TOKENIZE_BUDGET_S,
            "within_budget": tokenize_s < TOKENIZE_BUDGET_S,
            "texts_per_second": round(len(texts) / tokenize_s),
            "tokens_per_text_mean": round(statistics.mean(lengths), 2),
            "tokens_per_text_max": max(lengths),
            "unknown_token_share": unknown / sum(lengths),
        },
        "dataset_map": {
            "how": "tokenize_classification(train split) with Dataset.map(batched=True), caching off",
            "texts": len(nsmc["train"]),
            "seconds": round(map_s, 2),
        },
        "examples": {
            sentence: tokenizer.convert_ids_to_tokens(tokenizer(sentence)["input_ids"]) for sentence in SEED_SENTENCES
        },
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    print(f"written to {output}")


if __name__ == "__main__":
    main()
