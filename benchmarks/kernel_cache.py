"""What oneDNN's cache of compiled kernels costs a training run: its default size against
``hf_transformer.training.keep_compiled_kernels`` (what the training scripts call first).

On a CPU, torch's bfloat16 products run through oneDNN, which compiles a kernel per shape and keeps the last 1,024.
This script trains the main job's masked-token model (d_model 128, 2 layers, 4 heads, feed-forward 512, fused AdamW)
on length-grouped batches in random order, as the encoder scripts do, once in a fresh process with oneDNN's default
cache and once with ``keep_compiled_kernels``: the variable is read once per process, so each setting needs a process
of its own. Rounds alternate which setting runs first; each child trains the same batches in the same order from the
same weights, and its time per step covers the whole run, the compiling included, as a training run pays it.

    python -m benchmarks.kernel_cache --texts runs/nsmc-data/train.jsonl --tokenizer runs/nsmc-pretrained
    python -m benchmarks.kernel_cache --rounds 1 --steps 4 --batch_size 8 --output /tmp/cache.md   # seconds

Without ``--tokenizer`` a 2,000-piece BPE tokenizer is trained on the texts; without ``--texts`` the texts are
made up. Writes ``benchmarks/results/kernel_cache.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

try:  # python -m benchmarks.kernel_cache, or imported from the repository root
    from benchmarks.batch_order import masked_lm_training_step, sweep_batches
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from benchmarks.collation import text_arguments, texts_and_tokenizer
except ModuleNotFoundError:  # python benchmarks/kernel_cache.py: the script's own folder is on the path
    from batch_order import masked_lm_training_step, sweep_batches
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from collation import text_arguments, texts_and_tokenizer

SETTINGS = ("oneDNN default", "keep_compiled_kernels")
REPOSITORY = Path(__file__).resolve().parent.parent
# The report table's first four columns.
HEADINGS = ("precision", "steps a run", "oneDNN's default cache (ms)", "keep_compiled_kernels (ms)")


def shuffled_batches(ids: list[list[int]], batch_size: int, seed: int = 0) -> list[list[int]]:
    """Length-grouped batches of row indices (full batches only) in random order, as the encoder scripts train."""
    batches = sweep_batches(list(map(len, ids)), batch_size, seed)
    return [batches[i] for i in torch.randperm(len(batches), generator=torch.Generator().manual_seed(seed))]


def train(setting: str, folder: str, precision: str, threads: int) -> dict:
    """One child's run: the setting applied before the process's first product, then every batch of ``folder``'s
    batches.json trained once (the tokenizer saved beside it); the mean seconds per step."""
    from transformers import AutoTokenizer

    from hf_transformer.training import ONEDNN_CACHE_VARIABLE, keep_compiled_kernels, keep_freed_memory

    os.environ.pop(ONEDNN_CACHE_VARIABLE, None)  # the default, whatever the parent's environment holds
    if setting == "keep_compiled_kernels" and not keep_compiled_kernels():
        raise SystemExit("keep_compiled_kernels() changed nothing")
    keep_freed_memory()  # as the training scripts run
    torch.set_num_threads(threads)
    saved = json.loads((Path(folder) / "batches.json").read_text())
    step = masked_lm_training_step(AutoTokenizer.from_pretrained(folder), saved["max_length"], precision)
    started = time.perf_counter()
    for rows in saved["batches"]:
        step([{"input_ids": row} for row in rows])
    seconds = (time.perf_counter() - started) / len(saved["batches"])
    return {"setting": setting, "capacity": os.environ.get(ONEDNN_CACHE_VARIABLE), "seconds_per_step": seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    text_arguments(parser, output="benchmarks/results/kernel_cache.md")
    parser.add_argument("--steps", type=int, default=1000, help="training steps of each run")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = train(args.child, args.folder, args.precision, args.threads)
        print(json.dumps(result))
        return result

    rows_needed = int(args.steps * args.batch_size * 1.05)  # rows of one token left out
    texts, tokenizer = texts_and_tokenizer(args, rows_needed)
    ids = [row for row in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"] if len(row) > 1]
    batches = shuffled_batches(ids, args.batch_size)
    if len(batches) < args.steps:
        raise ValueError(f"{len(batches)} batches; the benchmark trains {args.steps}")
    seconds = {setting: [] for setting in SETTINGS}
    capacities = {setting: [] for setting in SETTINGS}  # as each child's process held it
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        saved = {"max_length": args.max_length, "batches": [[ids[i] for i in batch] for batch in batches[: args.steps]]}
        (Path(folder) / "batches.json").write_text(json.dumps(saved))
        for round_index in range(args.rounds):
            for setting in SETTINGS if round_index % 2 == 0 else reversed(SETTINGS):
                command = [
                    sys.executable, "-m", "benchmarks.kernel_cache", "--child", setting, "--folder", folder,
                    "--precision", args.precision, "--threads", str(args.threads),
                ]  # fmt: skip
                output = subprocess.run(command, cwd=REPOSITORY, check=True, capture_output=True, text=True).stdout
                result = json.loads(output.strip().splitlines()[-1])
                seconds[setting].append(result["seconds_per_step"])
                capacities[setting].append(result["capacity"])
                print(f"round {round_index + 1}: {setting} (capacity {result['capacity'] or 'default'}) "
                      f"{result['seconds_per_step'] * 1000:.2f} ms a step", flush=True)  # fmt: skip
    results = {args.precision: speed_up_result(seconds, SETTINGS[0], SETTINGS[1], {"steps": args.steps})}
    report = {"machine": machine_description(torch.device("cpu")), "texts": args.texts or "made up",
              "threads": args.threads, "rounds": args.rounds, "batch_size": args.batch_size,
              "seconds_per_step": seconds, "capacities": capacities, "results": results}  # fmt: skip
    intro = (
        f"A masked-token training run of the main job's model ({args.batch_size} rows a step, length-grouped batches "
        f"in random order), {args.threads} thread(s), each run in a fresh process with oneDNN's default kernel cache "
        f"and with `keep_compiled_kernels`; mean time a step over the whole run, compiling included, median of "
        f"{args.rounds} alternated rounds (texts: {report['texts']}; {report['machine']})."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "steps", SETTINGS[0], SETTINGS[1])
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
