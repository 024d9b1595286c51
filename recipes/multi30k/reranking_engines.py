"""Noisy-channel reranking's work per sentence (n-best lists by beam search, every candidate scored both ways by
teacher forcing) on torch against CTranslate2, side by side in one process, as ratios of medians.

    python -m recipes.multi30k.reranking_engines --forward runs/student-en-de --channel runs/student-de-en \
        --sources data/multi30k/train.en --sentences 128 --num_candidates 10 --threads 1 \
        --output recipes/multi30k/records/reranking-engines.json

The rounds alternate the engines, so that a machine's load falls on both alike. Before timing, the two engines'
scores of the same candidates are compared (they agree to rounding: the scores are the model's either way).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from hf_transformer import Predictor
from hf_transformer.commands import run_command
from recipes.multi30k.reranking import candidates, score_both_ways

ENGINES = ("torch", "ctranslate2")


def rerank_work(forward: Predictor, channel: Predictor, sources: list[str], num_candidates: int, length_penalty):
    nbest = candidates(forward, sources, num_candidates, length_penalty=length_penalty)
    return nbest, score_both_ways(forward, channel, sources, nbest)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--forward", required=True, help="the forward model's folder")
    parser.add_argument("--channel", required=True, help="the reverse direction's model folder")
    parser.add_argument("--sources", required=True, help="a text file, one source sentence a line")
    parser.add_argument("--sentences", type=int, default=128, help="the first N lines are translated each round")
    parser.add_argument("--num_candidates", type=int, default=10)
    parser.add_argument("--length_penalty", type=float, default=None)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None, help="JSON file for the results (a .md beside it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lines = Path(args.sources).read_text(encoding="utf-8").splitlines()
    sources = [line.strip() for line in lines if line.strip()][: args.sentences]
    options = {"batch_size": args.batch_size, "threads": args.threads}
    predictors = {
        "torch": (
            Predictor.from_pretrained(args.forward, **options),
            Predictor.from_pretrained(args.channel, **options),
        ),
        "ctranslate2": tuple(
            Predictor.from_pretrained(folder, engine="ctranslate2", **options)
            for folder in (args.forward, args.channel)
        ),
    }
    # The same candidates scored by both engines: the model's figures either way.
    nbest, scores = rerank_work(*predictors["torch"], sources[:16], args.num_candidates, args.length_penalty)
    theirs = score_both_ways(*predictors["ctranslate2"], sources[:16], nbest)
    largest = max(abs(a - b) for mine, other in zip(scores, theirs) for a, b in zip(mine.log_probs, other.log_probs))
    if largest > 1e-2:
        raise SystemExit(f"the engines' scores differ by {largest:.3g}: not the same model")
    seconds = {engine: [] for engine in ENGINES}
    counted = {}
    for round_ in range(args.rounds):
        for engine in ENGINES:
            started = time.perf_counter()
            nbest, _ = rerank_work(*predictors[engine], sources, args.num_candidates, args.length_penalty)
            seconds[engine].append(time.perf_counter() - started)
            counted[engine] = sum(map(len, nbest))
            print(f"round {round_ + 1}/{args.rounds} {engine}: {seconds[engine][-1]:.1f} s", flush=True)
    medians = {engine: statistics.median(values) for engine, values in seconds.items()}
    results = {
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "command": "python -m recipes.multi30k.reranking_engines "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "sentences": len(sources),
        "threads": args.threads,
        "num_candidates": args.num_candidates,
        "candidates": counted,
        "largest_score_difference": largest,
        "seconds": seconds,
        "sentences_per_second": {engine: round(len(sources) / median, 2) for engine, median in medians.items()},
        "speedup": round(medians["torch"] / medians["ctranslate2"], 2),
    }
    print(json.dumps({key: results[key] for key in ("sentences_per_second", "speedup")}))
    if args.output:
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        rate = results["sentences_per_second"]
        output.with_suffix(".md").write_text(
            f"# Reranking's work on torch and CTranslate2\n\n"
            f"{len(sources)} sentences, {args.num_candidates}-best lists, every candidate scored both ways, "
            f"{args.threads} thread(s), {args.rounds} alternating rounds (medians).\n\n"
            f"| engine | sentences/s |\n|---|---|\n| torch | {rate['torch']} |\n"
            f"| CTranslate2 | {rate['ctranslate2']} |\n\n"
            f"CTranslate2 **{results['speedup']}x**; largest difference of a score between the engines: "
            f"{largest:.2g}.\n",
            encoding="utf-8",
        )
    return results


if __name__ == "__main__":
    run_command(main)
