"""The float32 matrix products of a training step on CPU: torch's own (MKL's sgemm) against oneDNN's.

torch multiplies float32 matrices on a CPU through its BLAS, MKL, whose AVX-512 kernels run on Intel CPUs; on
another CPU with AVX-512 (an AMD EPYC of the Zen 4 or Zen 5 generation) MKL takes its AVX2 kernels. oneDNN, which
torch also carries (`torch.ops.mkldnn._linear_pointwise`, the op `hf_transformer.speed` decodes through), picks the
widest instructions the CPU has. This script times, side by side in one process, the three products of each linear
layer of the main job's model in a training step (the forward `x @ W.T`, and for the backward `dy @ W` and
`dy.T @ x`) both ways, at the job's shapes: a batch of 128 reviews of 16 tokens (2,048 rows) through the attention
projections (128 -> 128) and the feed-forward layers (128 -> 512 -> 128), and the output layer over 16,000 pieces
at the masked places (15%: 307 rows). Rounds alternate the two ways; each round checks that they agree to float32
rounding.

    python benchmarks/float32_products.py                     # two threads, as the job trains
    python benchmarks/float32_products.py --rounds 3 --repeats 2 --output /tmp/products.md   # seconds

Writes ``benchmarks/results/float32_products.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import time

import torch

try:  # python -m benchmarks.float32_products, or imported from the repository root
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
except ModuleNotFoundError:  # python benchmarks/float32_products.py: the script's own folder is on the path
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report

# The report table's first four columns.
HEADINGS = ("layer", "rows x in -> out", "MKL, torch's own (ms)", "oneDNN (ms)")

# (rows, in features, out features): the main job's linear layers in a pretraining step.
SHAPES = {
    "attention projection": (2048, 128, 128),
    "feed-forward in": (2048, 128, 512),
    "feed-forward out": (2048, 512, 128),
    "output layer (masked places)": (307, 128, 16000),
}


def onednn_product(a: torch.Tensor, b_transposed: torch.Tensor) -> torch.Tensor:
    """``a @ b_transposed.T`` through oneDNN's linear op (strided operands taken as they are)."""
    return torch.ops.mkldnn._linear_pointwise(a, b_transposed, None, "none", [], "")


def step_products(x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor, onednn: bool) -> list[torch.Tensor]:
    """The forward product and the two backward ones of ``y = x @ weight.T``: y, dy @ W, dy.T @ x."""
    if onednn:
        return [onednn_product(x, weight), onednn_product(grad, weight.t()), onednn_product(grad.t(), x.t())]
    return [x @ weight.t(), grad @ weight, grad.t() @ x]


def time_products(shape: tuple[int, int, int], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Per way (``mkl``: torch's own products; ``onednn``), the seconds of one step's three products in each
    round (``repeats`` steps timed a round, the order of the ways alternating). Raises where the two ways disagree
    beyond float32 rounding."""
    rows, inputs, outputs = shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inputs, generator=generator)
    weight = torch.randn(outputs, inputs, generator=generator) / inputs**0.5
    grad = torch.randn(rows, outputs, generator=generator)
    seconds = {"mkl": [], "onednn": []}
    for round_index in range(rounds):
        ways = ["mkl", "onednn"] if round_index % 2 == 0 else ["onednn", "mkl"]
        results = {}
        for way in ways:
            results[way] = step_products(x, weight, grad, way == "onednn")  # also the warm-up of its kernels
            started = time.perf_counter()
            for _ in range(repeats):
                step_products(x, weight, grad, way == "onednn")
            seconds[way].append((time.perf_counter() - started) / repeats)
        for name, mkl, onednn in zip(("forward", "dy @ W", "dy.T @ x"), results["mkl"], results["onednn"], strict=True):
            if not torch.allclose(mkl, onednn, rtol=1e-4, atol=1e-4 * float(mkl.abs().max())):
                raise AssertionError(f"{name} of {shape}: MKL and oneDNN disagree beyond float32 rounding")
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the main job trains at two)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=10, help="steps' products timed per round")
    parser.add_argument("--output", default="benchmarks/results/float32_products.md")
    args = parser.parse_args(argv)
    if not torch.backends.mkldnn.is_available():
        raise SystemExit("this torch has no oneDNN (torch.backends.mkldnn.is_available() is False)")
    torch.set_num_threads(args.threads)
    started = time.time()
    results = {}
    for kind, shape in SHAPES.items():
        seconds = time_products(shape, args.rounds, args.repeats)
        results[kind] = speed_up_result(seconds, "mkl", "onednn", {"rows x in -> out": "{} x {} -> {}".format(*shape)})
        medians = results[kind]["median_ms"]
        print(f"{kind} {shape}: MKL {medians['mkl']:.3f} ms, oneDNN {medians['onednn']:.3f} ms", flush=True)
    report = {"machine": machine_description(torch.device("cpu")), "threads": args.threads, "rounds": args.rounds,
              "repeats": args.repeats, "torch": torch.__version__, "results": results,
              "seconds": round(time.time() - started, 1)}  # fmt: skip
    intro = (
        f"A training step's three float32 products of each linear layer (forward, and the two of the backward), "
        f"{args.threads} threads, median of {args.rounds} alternated rounds of {args.repeats} steps "
        f"({report['machine']}; torch {torch.__version__}); the two ways agree to float32 rounding."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "rows x in -> out", "mkl", "onednn")
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
