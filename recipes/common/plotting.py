"""Learning curves from a Trainer log history, for the recipes' run records; a CJK font for Hangul, PNG writing.

    python -m recipes.common.plotting runs/nsmc --output curves.png

reads a Trainer `log_history` (a `log_history.json`, a `trainer_state.json`, or a folder with either: its
`log_history.json`, else its latest checkpoint's state) and draws the training loss and learning rate against the
step and every evaluation metric against the epoch; evaluations logged after training ended (final scoring) are
left out. `recipes.common.collect_results` draws every collected run's curves with it. Importing this module selects
matplotlib's file-only backend (Agg); it needs matplotlib (the ``train`` extra).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hf_transformer.commands import run_command
from hf_transformer.figures import CJK_FONTS, use_cjk_font  # noqa: E402, F401  (this module's API too)
from hf_transformer.figures import save_figure as save  # noqa: E402

__all__ = ["CJK_FONTS", "use_cjk_font", "save", "read_log_history", "plot_curves", "main"]

logger = logging.getLogger(__name__)

# Log keys that are bookkeeping, not metrics.
_NOT_METRICS = ("runtime", "per_second", "samples", "steps", "epoch", "step", "total_flos", "gen_len")


def read_log_history(path: str | Path) -> list[dict]:
    """A Trainer log history from `log_history.json`, `trainer_state.json` or a folder holding either."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / "log_history.json", path / "trainer_state.json"]
        checkpoints = path.glob("checkpoint-*/trainer_state.json")
        candidates += sorted(checkpoints, key=lambda state: int(state.parent.name.rsplit("-", 1)[-1]))
        found = [candidate for candidate in candidates if candidate.is_file()]
        if not found:
            raise FileNotFoundError(f"{path} holds no log_history.json or trainer_state.json")
        # The run's own files first (written at its end); else the latest checkpoint's state.
        path = found[0] if found[0].parent == path else found[-1]
    data = json.loads(path.read_text())
    history = data["log_history"] if isinstance(data, dict) else data
    if not isinstance(history, list):
        raise ValueError(f"{path}: expected a list of log entries")
    return history


def _is_metric(key: str, value) -> bool:
    return (
        key.startswith("eval_")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not any(key.endswith(part) or f"_{part}" in key for part in _NOT_METRICS)
        and math.isfinite(value)
    )


def plot_curves(history: list[dict], title: str | None = None) -> tuple[Figure, list]:
    """Training loss (with evaluation loss) and learning rate against the step, metrics against the epoch."""
    end = next((i for i, entry in enumerate(history) if "train_runtime" in entry), len(history))
    history = history[:end]
    train = [(e["step"], e["loss"]) for e in history if "loss" in e and "step" in e]
    evals = [e for e in history if "eval_loss" in e]
    rates = [(e["step"], e["learning_rate"]) for e in history if "learning_rate" in e and "step" in e]
    metrics = sorted({k for e in history for k, v in e.items() if _is_metric(k, v) and k != "eval_loss"})
    if not train and not evals:
        raise ValueError("the log history has no training or evaluation loss to draw")

    panels = ["loss"] + (["learning_rate"] if rates else []) + metrics
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False, layout="constrained")
    drawn = []
    for axes, panel in zip((a for row in grid for a in row), panels):
        drawn.append(axes)
        if panel == "loss":
            if train:
                axes.plot(*zip(*train), label="train loss")
            if evals:
                axes.plot([e["step"] for e in evals], [e["eval_loss"] for e in evals], "o-", label="validation loss")
            axes.set_xlabel("step")
            axes.set_ylabel("loss")
            axes.legend()
        elif panel == "learning_rate":
            axes.plot(*zip(*rates))
            axes.set_xlabel("step")
            axes.set_ylabel("learning rate")
        else:
            points = [(e.get("epoch", e.get("step")), e[panel]) for e in history if panel in e]
            axes.plot(*zip(*points), "o-")
            axes.set_xlabel("epoch")
            axes.set_ylabel(panel.removeprefix("eval_"))
        axes.set_title(panel.replace("_", " "))
        axes.grid(alpha=0.3)
    for axes in [a for row in grid for a in row][len(panels) :]:
        axes.remove()
    if title:
        figure.suptitle(title)
    return figure, drawn


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log_history", help="log_history.json, trainer_state.json or a model / checkpoint folder")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default=None, help="the figure's title (default: the log history's path)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    font = use_cjk_font()
    figure, panels = plot_curves(read_log_history(args.log_history), title=args.title or str(args.log_history))
    size = tuple(int(round(v * args.dpi)) for v in figure.get_size_inches())
    output = save(figure, args.output, dpi=args.dpi)
    logger.info("wrote %s (%d panels)", output, len(panels))
    return {"output": str(output), "panels": len(panels), "size": size, "font": font}


if __name__ == "__main__":
    run_command(main)
