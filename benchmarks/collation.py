"""What a training batch's collation costs: transformers' collators against the package's (`hf_transformer.data`).

The package's `masked_token_collator` and `classification_collator` give transformers' batches, and for masked
tokens the same random draws, with the padding built in torch (`pad_token_rows`) and the special tokens found in one
`torch.isin`. This script times both on the same rows, in alternated rounds, one thread (collation runs in the
training process, between steps), and checks on every batch that the two agree.

    python benchmarks/collation.py --texts runs/nsmc-data/train.jsonl --tokenizer runs/nsmc-pretrained
    python benchmarks/collation.py --rounds 3 --batches 4 --output /tmp/collation.md   # seconds: a small tokenizer

Without ``--tokenizer`` a 2,000-piece BPE tokenizer is trained on the texts; without ``--texts`` the texts are
made up. Writes ``benchmarks/results/collation.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

try:  # python -m benchmarks.collation, or imported from the repository root
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
except ModuleNotFoundError:  # python benchmarks/collation.py: the script's own folder is on the path
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report

# The report table's first four columns.
HEADINGS = ("batch", "rows", "transformers (ms)", "hf_transformer (ms)")


def read_texts(path: str | None, count: int) -> list[str]:
    """``count`` texts: the ``text`` fields of a JSON-lines file, or made-up sentences of 1 to 40 words."""
    if path:
        with open(path, encoding="utf-8") as lines:
            texts = [json.loads(line)["text"] for line, _ in zip(lines, range(count))]
        if len(texts) < count:
            raise ValueError(f"{path} holds {len(texts)} texts; the benchmark reads {count}")
        return texts
    rng = random.Random(0)
    words = ["재미있는", "영화", "정말", "최고", "지루한", "배우", "연기", "스토리", "다시", "보고", "싶다", "별로"]
    return [" ".join(rng.choices(words, k=rng.randint(1, 40))) for _ in range(count)]


def text_arguments(parser, output: str) -> None:
    """The arguments both text benchmarks take: where the texts and the tokenizer come from, the rounds, the report."""
    parser.add_argument("--texts", help="a JSON-lines file with a text field (default: made-up sentences)")
    parser.add_argument("--tokenizer", help="a tokenizer folder (default: one trained on the texts)")
    parser.add_argument("--max_length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--output", default=output)


def texts_and_tokenizer(args, count: int):
    """``count`` texts (`read_texts`) and the tokenizer of ``--tokenizer``, else a 2,000-piece BPE one trained on
    them."""
    from transformers import AutoTokenizer

    from hf_transformer.tokenization import train_tokenizer

    texts = read_texts(args.texts, count)
    if args.tokenizer:
        return texts, AutoTokenizer.from_pretrained(args.tokenizer)
    return texts, train_tokenizer(texts, vocab_size=2000, model_max_length=args.max_length, show_progress=False)


def time_collators(collators: dict, batches: list[list[dict]], rounds: int, seed: int = 0) -> dict[str, list[float]]:
    """Per collator, the seconds per batch of each round (rounds alternate the collators' order). Every batch is
    drawn under the same seed by each collator and must come out the same."""
    seconds = {name: [] for name in collators}
    for round_index in range(rounds):
        names = list(collators) if round_index % 2 == 0 else list(reversed(collators))
        outputs = {}
        for name in names:
            torch.manual_seed(seed + round_index)
            started = time.perf_counter()
            outputs[name] = [collators[name](rows) for rows in batches]
            seconds[name].append((time.perf_counter() - started) / len(batches))
        first, *others = outputs.values()
        for other in others:
            for one, two in zip(first, other, strict=True):
                if one.keys() != two.keys() or not all(torch.equal(one[key], two[key]) for key in one):
                    raise AssertionError("the collators made different batches")
    return seconds


def main(argv: list[str] | None = None) -> dict:
    from transformers import DataCollatorForLanguageModeling, DataCollatorWithPadding

    from hf_transformer.data import classification_collator, masked_token_collator

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    text_arguments(parser, output="benchmarks/results/collation.md")
    parser.add_argument("--batches", type=int, default=20, help="batches of each kind timed per round")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    kinds = {"masked tokens": 128, "classification": 64}  # rows per batch: the main job's
    texts, tokenizer = texts_and_tokenizer(args, args.batches * max(kinds.values()))
    encoded = tokenizer(texts, truncation=True, max_length=args.max_length)
    rows = [{"input_ids": ids, "attention_mask": mask} for ids, mask in zip(*encoded.values(), strict=True)]
    collators = {
        "masked tokens": {
            "transformers": DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
            "hf_transformer": masked_token_collator(tokenizer, mlm_probability=0.15),
        },
        "classification": {
            "transformers": DataCollatorWithPadding(tokenizer),
            "hf_transformer": classification_collator(tokenizer),
        },
    }
    results = {}
    for kind, size in kinds.items():
        labelled = rows if kind == "masked tokens" else [row | {"label": i % 2} for i, row in enumerate(rows)]
        batches = [labelled[i * size : (i + 1) * size] for i in range(args.batches)]
        seconds = time_collators(collators[kind], batches, args.rounds)
        results[kind] = speed_up_result(seconds, "transformers", "hf_transformer", {"rows_per_batch": size})
        medians = results[kind]["median_ms"]
        print(f"{kind}: {size} rows, transformers {medians['transformers']:.2f} ms, "
              f"hf_transformer {medians['hf_transformer']:.2f} ms a batch", flush=True)  # fmt: skip

    report = {"machine": machine_description(torch.device("cpu")), "texts": args.texts or "made up",
              "rounds": args.rounds, "batches": args.batches, "results": results}  # fmt: skip
    intro = (
        f"Collating one batch, one thread, median of {args.rounds} alternated rounds of {args.batches} batches "
        f"(texts: {report['texts']}; {report['machine']}); the two collators' batches are the same."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "rows_per_batch", "transformers", "hf_transformer")
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
