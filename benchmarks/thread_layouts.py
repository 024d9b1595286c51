"""How to spend N CPU cores on a deployed engine: one worker with N threads, or N one-thread workers (CPU).

CTranslate2 (``inter_threads`` workers of ``intra_threads`` threads) and ``OnnxSeq2SeqGenerator`` (``workers``
Python threads, each calling sessions of ``intra_op_num_threads``) can use the cores inside each matrix product or
across parts of the batch. This script times, in interleaved rounds in one process, each engine in three layouts
on the benchmark's models, random sources and 32 forced new tokens (``benchmarks/benchmark.py``), against Marian's
``generate`` on torch's threads:

- ``1x1``: one worker of one thread (one core);
- ``1xN``: one worker of N threads;
- ``Nx1``: N workers of one thread each, each decoding a part of the batch (what ``for_cpu(N)`` builds).

    python benchmarks/thread_layouts.py                      # base-small, batch 8 and 32, greedy and beam 4
    python benchmarks/thread_layouts.py --configs tiny --batch-sizes 3 --rounds 3 --output /tmp/layouts.md

Writes ``docs/performance-thread-layouts.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark as bench  # noqa: E402

KINDS = (("greedy", 1), ("beam4", 4))


def layouts(threads: int) -> dict[str, tuple[int, int]]:
    """Layout name -> (workers, threads per worker)."""
    return {"1x1": (1, 1), f"1x{threads}": (1, threads), f"{threads}x1": (threads, 1)}


ENGINES = ("ct2", "ct2_int8", "onnx")


def build_engines(ours, deployment: bench.Deployment, threads: int, names=ENGINES) -> dict[str, object]:
    """``{engine}_{layout}`` -> a callable ``(batch, num_beams) -> rows generated``, for the engines ``names``."""
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator

    engines = {}
    for name, quantization in (("ct2", None), ("ct2_int8", "int8")):
        if name not in names:
            continue
        folder = deployment.ctranslate2(ours, quantization)
        for layout, (workers, per_worker) in layouts(threads).items():
            generator = CTranslate2Generator(folder, inter_threads=workers, intra_threads=per_worker)
            engines[f"{name}_{layout}"] = lambda batch, beams, g=generator: g.generate(
                batch["source"], batch["source_mask"], num_beams=beams, max_new_tokens=bench.NEW_TOKENS,
                min_new_tokens=bench.NEW_TOKENS, length_penalty=1.0,
            )  # fmt: skip
    if "onnx" not in names:
        return engines
    from hf_transformer.export.onnx_export import OnnxSeq2SeqGenerator

    folder = deployment.onnx(ours)
    for layout, (workers, per_worker) in layouts(threads).items():
        generator = OnnxSeq2SeqGenerator(folder, intra_op_num_threads=per_worker, workers=workers)
        engines[f"onnx_{layout}"] = lambda batch, beams, g=generator: g.generate(
            batch["source"].numpy(), batch["source_mask"].numpy(), num_beams=beams,
            max_new_tokens=bench.NEW_TOKENS, min_new_tokens=bench.NEW_TOKENS, length_penalty=1.0,
        )  # fmt: skip
    return engines


def time_section(marian: bench.Runner, engines: dict, batch: dict, beams: int, rounds: int, budget_s: float) -> dict:
    """Marian's ``generate`` and every engine on one batch, interleaved: median seconds and x Marian."""
    tasks = {"marian": lambda: marian.generate(batch, beams)}
    tasks.update({name: (lambda f=f: f(batch, beams)) for name, f in engines.items()})
    seconds = bench.interleaved(tasks, torch.device("cpu"), warmup=1, rounds=rounds, budget_s=budget_s)
    ratios = bench.speed_ratios(seconds, "marian")
    return dict(
        rounds=len(seconds["marian"]),
        seconds={name: statistics.median(times) for name, times in seconds.items()},
        vs_marian={name: ratios[name][1] for name in engines},
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="base-small", help="comma list of " + ", ".join(bench.CONFIGS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma list of " + ", ".join(ENGINES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per section (at least 3 rounds)")
    parser.add_argument(
        "--output", default=str(Path(__file__).resolve().parents[1] / "docs" / "performance-thread-layouts.md")
    )
    args = parser.parse_args(argv)
    names = args.engines.split(",")
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {unknown}: choose among {', '.join(ENGINES)}")
    needed = {"ct2": ["ctranslate2"], "ct2_int8": ["ctranslate2"], "onnx": ["onnxruntime", "onnxscript"]}
    for module in dict.fromkeys(module for name in names for module in needed[name]):
        bench._require(module)
    threads = torch.get_num_threads()
    device = torch.device("cpu")
    began = time.perf_counter()
    results = []
    for config in args.configs.split(","):
        c = bench.CONFIGS[config]
        deployment = bench.Deployment()
        try:
            marian = bench.Runner(bench.ENTRIES["marian"], c, device, torch.float32)
            torch.manual_seed(0)  # ours's weights, as every deployed engine of the benchmark holds them
            engines = build_engines(bench.build_ours(c).eval(), deployment, threads, names)
            if torch.get_num_threads() != threads:
                raise RuntimeError(f"building the engines changed torch's threads to {torch.get_num_threads()}")
            for batch_size in args.batch_sizes:
                batch = bench.make_batch(c, batch_size, device, seed=1)
                for kind, beams in KINDS:
                    row = time_section(marian, engines, batch, beams, args.rounds, args.budget)
                    row = dict(config=config, batch=batch_size, search=kind, **row)
                    results.append(row)
                    print(f"{config} batch {batch_size} {kind}: " + ", ".join(
                        f"{name} {ratio:.2f}x" for name, ratio in row["vs_marian"].items()))  # fmt: skip
        finally:
            deployment.close()
    record = dict(
        machine=bench.machine_description(device), threads=threads, torch=torch.__version__,
        seconds=round(time.perf_counter() - began, 1), layouts=list(layouts(threads)), results=results,
    )  # fmt: skip
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report(record), encoding="utf-8")
    output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {output} and {output.with_suffix('.json')} in {record['seconds']} s")
    return record


def report(record: dict) -> str:
    names = list(record["results"][0]["vs_marian"]) if record["results"] else []
    lines = [
        "# Deployed engines: one worker of many threads, or many workers of one",
        "",
        f"{record['machine']}, torch {record['torch']} on {record['threads']} threads for Marian; written by "
        "`benchmarks/thread_layouts.py` (medians of per-round speed ratios against Marian's `generate`, interleaved "
        "rounds in one process, 32 forced new tokens). Layout `WxT`: W workers of T threads each.",
        "",
        "| config | batch | search | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for row in record["results"]:
        cells = [row["config"], str(row["batch"]), row["search"]] + [f"{row['vs_marian'][n]:.2f}" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
