"""How much of a deployed engine's lead over HF Marian the encoder leaves room for (CPU, float32 and int8).

A generation call is one encoder pass over the source, then one decoder step per new token. The encoder is a few
large matrix products, as fast in CTranslate2 as in torch when both compute in float32; an engine's lead comes from
the step loop. This script times, in interleaved rounds on the benchmark's configurations and batches (``ours``'s
weights, the random sources and the 32 forced new tokens of ``benchmarks/benchmark.py``):

- Marian's encoder alone, and Marian's ``generate`` (greedy and beam 4);
- ours in CTranslate2 (float32 and int8) decoding one new token (the encoder and a first step) and the full 32.

From these: each engine's measured speed against Marian, the speed it would reach if every step after the first
were free (``bound``: Marian's whole call over the engine's encoder and first step), and the shares of the encoder in
Marian's and the engine's calls. A target ratio above ``bound`` cannot be reached by a faster step loop alone.

    python benchmarks/encoder_share.py                         # base-small and seed, batch 8 and 32: minutes
    python benchmarks/encoder_share.py --configs tiny --rounds 3 --output /tmp/share.md   # seconds (tests)

Writes ``benchmarks/results/performance-encoder-share.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

try:  # python -m benchmarks.encoder_share, or imported from the repository root
    from benchmarks import benchmark as bench
except ModuleNotFoundError:  # python benchmarks/encoder_share.py: the script's own folder is on the path
    import benchmark as bench

ENGINES = {"ct2": None, "ct2_int8": "int8"}  # name -> CTranslate2 quantization
KINDS = (("greedy", 1), ("beam4", 4))


def measure(config: str, batch_sizes: list[int], rounds: int, budget_s: float, log=print) -> list[dict]:
    """One configuration, converted once: per batch size, median seconds of each timed call and the derived
    ratios."""
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator

    c = bench.CONFIGS[config]
    device = torch.device("cpu")
    deployment = bench.Deployment()
    try:
        marian = bench.Runner(bench.ENTRIES["marian"], c, device, torch.float32)
        torch.manual_seed(0)  # the weights every deployed engine of the benchmark holds
        ours = bench.build_ours(c).eval()
        generators = {
            name: CTranslate2Generator.for_cpu(deployment.ctranslate2(ours, quantization), torch.get_num_threads())
            for name, quantization in ENGINES.items()
        }
        encoder = marian.model.get_encoder().eval()
        return [
            _measure_batch(config, size, bench.make_batch(c, size, device, seed=1), marian, encoder, generators,
                           rounds, budget_s, log)
            for size in batch_sizes
        ]  # fmt: skip
    finally:
        deployment.close()


def _measure_batch(config, batch_size, batch, marian, encoder, generators, rounds, budget_s, log) -> dict:
    def marian_encoder():
        with torch.inference_mode():
            encoder(input_ids=batch["source"], attention_mask=batch["source_mask"])

    def engine(generator, beams: int, new_tokens: int):
        def call():
            rows = generator.generate(
                batch["source"], batch["source_mask"], num_beams=beams, max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, length_penalty=1.0,
            )  # fmt: skip
            bench.check_new_tokens("CTranslate2", [len(row) for row in rows], new_tokens)

        return call

    tasks = {"marian_encoder": marian_encoder}
    for kind, beams in KINDS:
        tasks[f"marian_{kind}"] = lambda beams=beams: marian.generate(batch, beams)
        for name, generator in generators.items():
            tasks[f"{name}_{kind}"] = engine(generator, beams, bench.NEW_TOKENS)
            tasks[f"{name}_{kind}_first_step"] = engine(generator, beams, 1)
    seconds = bench.interleaved(tasks, torch.device("cpu"), warmup=1, rounds=rounds, budget_s=budget_s)
    median = {name: statistics.median(times) for name, times in seconds.items()}
    row = dict(config=config, batch=batch_size, rounds=len(seconds["marian_encoder"]), seconds=median)
    for kind, _ in KINDS:
        marian_s = median[f"marian_{kind}"]
        row[f"marian_{kind}_encoder_share"] = median["marian_encoder"] / marian_s
        for name in ENGINES:
            engine_s, first_s = median[f"{name}_{kind}"], median[f"{name}_{kind}_first_step"]
            row[f"{name}_{kind}_vs_marian"] = marian_s / engine_s
            row[f"{name}_{kind}_bound"] = marian_s / first_s
            row[f"{name}_{kind}_first_step_share"] = first_s / engine_s
    log(
        f"{config} batch {batch_size}: "
        + ", ".join(f"{name} greedy {row[f'{name}_greedy_vs_marian']:.2f}x (bound {row[f'{name}_greedy_bound']:.2f}x)"
                    for name in ENGINES)
    )  # fmt: skip
    return row


def report(record: dict) -> str:
    lines = [
        "# Where the deployed engines' time goes: encoder and step loop",
        "",
        f"{record['machine']}, {record['threads']} threads; torch {record['torch']}, transformers "
        f"{record['transformers']}, ctranslate2 {record['ctranslate2']}. Written by `benchmarks/encoder_share.py` "
        "(medians of interleaved rounds, the same models, sources and 32 forced new tokens as "
        "`benchmarks/benchmark.py --deployed`).",
        "",
        "`x Marian`: the engine's whole call against Marian's `generate`. `bound`: Marian's whole call over the "
        "engine's encoder and first step, the most the engine could reach if every later step cost nothing. "
        "`encoder %`: Marian's encoder alone as a share of its call; `first step %`: the engine's encoder and first "
        "step as a share of its call.",
        "",
        "| config | batch | search | Marian encoder % | CT2 fp32 x Marian | bound | first step % "
        "| CT2 int8 x Marian | bound | first step % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record["results"]:
        for kind, _ in KINDS:
            cells = [row["config"], str(row["batch"]), kind, f"{row[f'marian_{kind}_encoder_share']:.0%}"]
            for name in ENGINES:
                cells += [
                    f"{row[f'{name}_{kind}_vs_marian']:.2f}",
                    f"{row[f'{name}_{kind}_bound']:.2f}",
                    f"{row[f'{name}_{kind}_first_step_share']:.0%}",
                ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="base-small,seed", help="comma list of " + ", ".join(bench.CONFIGS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=90.0, help="seconds per configuration and batch (>= 3 rounds)")
    parser.add_argument(
        "--output", default=str(Path(__file__).resolve().parent / "results" / "performance-encoder-share.md")
    )
    args = parser.parse_args(argv)
    bench._require("ctranslate2")
    import ctranslate2
    import transformers

    began = time.perf_counter()
    results = [
        row for config in args.configs.split(",") for row in measure(config, args.batch_sizes, args.rounds, args.budget)
    ]
    record = dict(
        machine=bench.machine_description(torch.device("cpu")), threads=torch.get_num_threads(),
        torch=torch.__version__, transformers=transformers.__version__, ctranslate2=ctranslate2.__version__,
        new_tokens=bench.NEW_TOKENS, seconds=round(time.perf_counter() - began, 1), results=results,
    )  # fmt: skip
    bench.write_report(args.output, report(record), record)
    return record


if __name__ == "__main__":
    main()
