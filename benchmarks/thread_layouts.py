"""How to spend N CPU cores on a deployed engine: one worker with N threads, or N one-thread workers (CPU).

CTranslate2 (``inter_threads`` workers of ``intra_threads`` threads) and ``OnnxSeq2SeqGenerator`` (``workers``
Python threads, each calling sessions of ``intra_op_num_threads``) can use the cores inside each matrix product or
across parts of the batch. This script times each engine in three layouts on the benchmark's models, random sources
and 32 forced new tokens (``benchmarks/benchmark.py``):

- ``1x1``: one worker of one thread (one core);
- ``1xN``: one worker of N threads;
- ``Nx1``: N workers of one thread each, each decoding a part of the batch (what ``for_cpu(N)`` builds).

One layout's engines exist at a time, timed in interleaved rounds with Marian's ``generate`` on torch's threads,
and are deleted before the next layout is built: a CTranslate2 translator with several threads per worker slows
the process's torch while it exists (its OpenMP threads compete with torch's), so Marian is timed beside each
layout and reported. The speed of a layout is given against the same engine's ``Nx1`` layout.

    python benchmarks/thread_layouts.py                      # base-small, batch 8 and 32, greedy and beam 4
    python benchmarks/thread_layouts.py --configs tiny --batch-sizes 3 --rounds 3 --output /tmp/layouts.md

Writes ``benchmarks/results/performance-thread-layouts.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch

try:  # python -m benchmarks.thread_layouts, or imported from the repository root
    from benchmarks import benchmark as bench
except ModuleNotFoundError:  # python benchmarks/thread_layouts.py: the script's own folder is on the path
    import benchmark as bench


def layouts(threads: int) -> dict[str, tuple[int, int]]:
    """Layout name -> (workers, threads per worker)."""
    return {"1x1": (1, 1), f"1x{threads}": (1, threads), f"{threads}x1": (threads, 1)}


ENGINES = ("ct2", "ct2_int8", "onnx")
KINDS = (("greedy", 1), ("beam4", 4))


def build_engines(ours, deployment: bench.Deployment, workers: int, per_worker: int, names=ENGINES) -> dict:
    """Engine name -> a callable ``(batch, num_beams)`` decoding with ``workers`` workers of ``per_worker`` threads."""
    engines = {}
    for name, quantization in (("ct2", None), ("ct2_int8", "int8")):
        if name in names:
            from hf_transformer.export.ctranslate2_export import CTranslate2Generator

            folder = deployment.ctranslate2(ours, quantization)
            generator = CTranslate2Generator(folder, inter_threads=workers, intra_threads=per_worker)
            engines[name] = lambda batch, beams, g=generator: bench.check_new_tokens(
                "CTranslate2",
                [len(row) for row in g.generate(
                    batch["source"], batch["source_mask"], num_beams=beams, max_new_tokens=bench.NEW_TOKENS,
                    min_new_tokens=bench.NEW_TOKENS, length_penalty=1.0,
                )],
            )  # fmt: skip
    if "onnx" in names:
        from hf_transformer.export.onnx_export import OnnxSeq2SeqGenerator

        generator = OnnxSeq2SeqGenerator(deployment.onnx(ours), intra_op_num_threads=per_worker, workers=workers)
        engines["onnx"] = lambda batch, beams, g=generator: bench.check_new_tokens(
            "ONNX Runtime",
            [
                g.generate(
                    batch["source"].numpy(),
                    batch["source_mask"].numpy(),
                    num_beams=beams,
                    max_new_tokens=bench.NEW_TOKENS,
                    min_new_tokens=bench.NEW_TOKENS,
                    length_penalty=1.0,
                ).shape[1]
                - 1
            ],
        )  # fmt: skip  (B, 1 + new): the start token first
    return engines


def time_section(marian: bench.Runner, engines: dict, batch: dict, beams: int, rounds: int, budget_s: float) -> dict:
    """Median seconds of Marian's ``generate`` and of every engine on one batch, in interleaved rounds."""
    tasks = {"marian": lambda: marian.generate(batch, beams)}
    tasks.update({name: (lambda f=f: f(batch, beams)) for name, f in engines.items()})
    seconds = bench.interleaved(tasks, torch.device("cpu"), warmup=1, rounds=rounds, budget_s=budget_s)
    return {name: statistics.median(times) for name, times in seconds.items()}


def measure_config(config: str, names: list[str], args, threads: int) -> list[dict]:
    """Rows of one configuration: per batch and search, each engine's and Marian's seconds beside each layout."""
    c = bench.CONFIGS[config]
    device = torch.device("cpu")
    batches = {size: bench.make_batch(c, size, device, seed=1) for size in args.batch_sizes}
    rows = {
        (size, kind): dict(config=config, batch=size, search=kind, seconds={}) for size in batches for kind, _ in KINDS
    }
    deployment = bench.Deployment()
    try:
        marian = bench.Runner(bench.ENTRIES["marian"], c, device, torch.float32)
        torch.manual_seed(0)  # ours's weights, as every deployed engine of the benchmark holds them
        ours = bench.build_ours(c).eval()
        for layout, (workers, per_worker) in layouts(threads).items():
            engines = build_engines(ours, deployment, workers, per_worker, names)
            bench.check_threads(threads, f"building the {layout} engines")
            for size, batch in batches.items():
                for kind, beams in KINDS:
                    seconds = time_section(marian, engines, batch, beams, args.rounds, args.budget)
                    row = rows[size, kind]
                    row["seconds"][f"marian_beside_{layout}"] = seconds.pop("marian")
                    row["seconds"].update({f"{name}_{layout}": value for name, value in seconds.items()})
            print(f"{config} layout {layout} timed", flush=True)
            del engines
            gc.collect()  # the translators and sessions (and their threads) go before the next layout is built
    finally:
        deployment.close()
    spread = f"{threads}x1"
    for row in rows.values():
        row["vs_spread"] = {
            f"{name}_{layout}": row["seconds"][f"{name}_{spread}"] / row["seconds"][f"{name}_{layout}"]
            for name in names
            for layout in layouts(threads)
        }
    return list(rows.values())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="base-small", help="comma list of " + ", ".join(bench.CONFIGS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma list of " + ", ".join(ENGINES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per section (at least 3 rounds)")
    parser.add_argument(
        "--output", default=str(Path(__file__).resolve().parent / "results" / "performance-thread-layouts.md")
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
    began = time.perf_counter()
    results = [row for config in args.configs.split(",") for row in measure_config(config, names, args, threads)]
    record = dict(
        machine=bench.machine_description(torch.device("cpu")), threads=threads, torch=torch.__version__,
        seconds=round(time.perf_counter() - began, 1), engines=names, layouts=list(layouts(threads)),
        results=results,
    )  # fmt: skip
    bench.write_report(args.output, report(record), record)
    return record


def report(record: dict) -> str:
    names, layout_names = record["engines"], record["layouts"]
    spread = layout_names[-1]
    lines = [
        "# Deployed engines: one worker of many threads, or many workers of one",
        "",
        f"{record['machine']}, {record['threads']} threads; torch {record['torch']}. Written by "
        "`benchmarks/thread_layouts.py`: medians of interleaved rounds in one process, 32 forced new tokens; one "
        f"layout's engines alive at a time. Layout `WxT`: W workers of T threads each. Each cell: milliseconds, and "
        f"in brackets the speed against the same engine's `{spread}` layout (what `for_cpu` builds). `Marian beside`: "
        "Marian's `generate` on torch's threads, timed in the same rounds as that layout's engines.",
        "",
        "| config | batch | search | layout | " + " | ".join(names) + " | Marian beside |",
        "|---|---|---|---|" + "---|" * (len(names) + 1),
    ]
    for row in record["results"]:
        for layout in layout_names:
            cells = [row["config"], str(row["batch"]), row["search"], layout]
            cells += [
                f"{row['seconds'][f'{n}_{layout}'] * 1e3:.0f} ({row['vs_spread'][f'{n}_{layout}']:.2f})" for n in names
            ]
            cells.append(f"{row['seconds'][f'marian_beside_{layout}'] * 1e3:.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
