"""A training process's resident memory over its steps, with glibc's malloc as it comes and with
``hf_transformer.training.keep_freed_memory`` (what the training scripts call first).

    python -m benchmarks.training_memory --steps 600 --precision bfloat16 \
        --output benchmarks/results/training-memory.json

The model has the Multi30k recipe's shape (d_model 256, 3+3 layers, 8,000 tokens, batch 64, AdamW); each step's
source and target lengths are drawn anew (6-41 tokens), as batches grouped by length come in random order. Each
setting runs in a fresh process (malloc's settings must come before the heap grows), one after the other, at one
thread. Every ``--report_every`` steps a child reports its resident size, glibc's heap (``mallinfo2``: the arena
taken from the kernel, the bytes in use, the free bytes inside it) and the median step time of the last steps;
its last report also says whether its malloc kept a large freed block (``large_blocks_kept``: keep_freed_memory's
settings in effect), and a run whose setting did not take effect is refused.
The times are only a guide (run quiet for them: ``benchmarks/load.py`` and the lab notes hold the speed figures);
the memory figures do not depend on the machine's load.

Writes ``--output`` (.json) and a .md and .png beside it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = ("glibc", "keep_freed_memory")
REPOSITORY = Path(__file__).resolve().parent.parent


class _MallInfo2(ctypes.Structure):
    _FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS.split()]


def heap() -> dict[str, float]:
    """glibc's heap in MiB: taken from the kernel (sbrk arenas and mmapped blocks), in use, free inside the arenas."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    mib = 1 << 20
    return {
        "heap_mib": (info.arena + info.hblkhd) / mib,
        "in_use_mib": (info.uordblks + info.hblkhd) / mib,
        "free_mib": info.fordblks / mib,
    }


PROBE_BYTES = 64 << 20  # above glibc's default ceiling of its mmap threshold (32 MiB), below keep_freed_memory's


def large_blocks_kept() -> bool:
    """Whether malloc keeps a large freed block in its heap, as with keep_freed_memory's settings: a 64 MiB block
    is taken from the heap (not mapped apart, as glibc's defaults map every block above 32 MiB) and its memory is
    still in the heap once freed (not trimmed). Allocates and frees that block once, untouched."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2()
    block = libc.malloc(PROBE_BYTES)
    if not block:
        raise MemoryError(f"malloc({PROBE_BYTES}) failed")
    held = libc.mallinfo2()
    libc.free(block)
    after = libc.mallinfo2()
    mapped_apart = held.hblkhd - before.hblkhd >= PROBE_BYTES
    return not mapped_apart and after.arena >= held.arena


def child(setting: str, args: argparse.Namespace) -> None:
    """Trains in this process with ``setting`` and prints a JSON line per report."""
    import torch

    from benchmarks.benchmark import process_memory_mb
    from hf_transformer import TransformerConfig, TransformerForConditionalGeneration
    from hf_transformer.training import keep_freed_memory

    if setting == "keep_freed_memory" and not keep_freed_memory():
        raise SystemExit("keep_freed_memory() changed nothing here: the C library is not glibc")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=args.vocab_size,
        d_model=args.d_model,
        n_layer=args.num_layers,
        num_attention_heads=args.num_heads,
        intermediate_size=4 * args.d_model,
        max_position_embeddings=64,
        decoder_max_position_embeddings=64,
        dropout=0.2,
        attention_dropout=0.1,
        label_smoothing=0.1,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    model = TransformerForConditionalGeneration(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = torch.Generator().manual_seed(1)
    times: list[float] = []
    for step in range(1, args.steps + 1):
        source_length = int(torch.randint(6, 42, (), generator=lengths))
        target_length = max(4, source_length + int(torch.randint(-4, 6, (), generator=lengths)))
        input_ids = torch.randint(3, args.vocab_size, (args.batch_size, source_length), generator=lengths)
        labels = torch.randint(3, args.vocab_size, (args.batch_size, target_length), generator=lengths)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bfloat16"):
            loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        if step % args.report_every == 0:
            resident = process_memory_mb("VmRSS")
            if resident is None:
                raise RuntimeError("no VmRSS in /proc/self/status: the resident size cannot be read here")
            report = {"setting": setting, "step": step, "resident_mib": resident, **heap()}
            report["median_step_ms"] = 1000 * statistics.median(times[-args.report_every :])
            if step + args.report_every > args.steps:  # the last report, its figures read: the setting's check
                report["large_blocks_kept"] = large_blocks_kept()
            print(json.dumps(report), flush=True)


def run_setting(setting: str, argv: list[str]) -> list[dict]:
    command = [sys.executable, "-m", "benchmarks.training_memory", "--child", setting, *argv]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    reports = []
    with subprocess.Popen(command, cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            report = json.loads(line)
            reports.append(report)
            print(
                f"{setting}: step {report['step']}, resident {report['resident_mib']:.0f} MiB, heap "
                f"{report['heap_mib']:.0f} MiB ({report['in_use_mib']:.0f} in use), "
                f"{report['median_step_ms']:.0f} ms a step",
                file=sys.stderr,
            )
    if process.returncode:
        raise RuntimeError(f"the {setting} run failed (exit status {process.returncode}): {' '.join(command)}")
    expected = setting == "keep_freed_memory"
    if not reports or reports[-1].get("large_blocks_kept") is not expected:
        raise RuntimeError(
            f"the {setting} run's malloc {'did not keep' if expected else 'kept'} a large freed block: its setting "
            "did not take effect (GLIBC_TUNABLES or MALLOC_*_ in the environment? another malloc?)"
        )
    return reports


def write_results(results: dict[str, list[dict]], meta: dict, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = [
        "# A training process's memory over its steps",
        "",
        f"`python -m benchmarks.training_memory {' '.join(meta['argv'])}` on {meta['cpu']}, one thread, "
        f"{meta['precision']}. MiB; heap: what glibc's malloc took from the kernel, of which in use and free.",
        "",
        "| setting | step | resident | heap | in use | free in the heap | median step (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, reports in results.items():
        for index in sorted({0, len(reports) // 2, len(reports) - 1}):
            report = reports[index]
            lines.append(
                f"| {setting} | {report['step']} | {report['resident_mib']:.0f} | {report['heap_mib']:.0f} | "
                f"{report['in_use_mib']:.0f} | {report['free_mib']:.0f} | {report['median_step_ms']:.0f} |"
            )
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(results, meta, output.with_suffix(".png"))


def plot(results: dict[str, list[dict]], meta: dict, path: Path) -> None:
    try:
        from hf_transformer.figures import pyplot, save_figure
    except ImportError:  # matplotlib is optional
        return
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 3.5))
    for setting, reports in results.items():
        steps = [report["step"] for report in reports]
        line = axes.plot(steps, [report["resident_mib"] for report in reports], label=f"{setting}: resident")[0]
        axes.plot(
            steps,
            [report["in_use_mib"] for report in reports],
            linestyle="--",
            color=line.get_color(),
            label=f"{setting}: in use",
        )
    axes.set_xlabel("training step")
    axes.set_ylabel("MiB")
    axes.set_title(f"Memory of a training process, {meta['precision']}, batch lengths changing each step")
    axes.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--report_every", type=int, default=50)
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--num_layers", type=int, default=3)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--output", type=Path, default=REPOSITORY / "benchmarks/results/training-memory.json")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < args.report_every or args.report_every < 1:
        parser.error(f"--steps ({args.steps}) must be at least --report_every ({args.report_every}), itself >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_arguments(argv)
    if args.child:
        child(args.child, args)
        return {}
    shape = ("steps", "report_every", "precision", "d_model", "num_layers", "num_heads", "vocab_size", "batch_size")
    child_argv = [text for name in shape for text in (f"--{name}", str(getattr(args, name)))]
    results = {setting: run_setting(setting, child_argv) for setting in args.settings}
    from hf_transformer.cpu import cpu_description  # the package (and torch) only where the record is written

    meta = {"argv": argv, "cpu": cpu_description(), "precision": args.precision, "steps": args.steps}
    write_results(results, meta, args.output)
    return results


if __name__ == "__main__":
    main()
