"""Figures of a saved model: per-head attention maps of one sentence, and the sinusoidal position table.

    python scripts/plot_attention.py attention runs/m30k-en-de "A man is riding a bike." --output attn.png
    python scripts/plot_attention.py attention runs/m30k-en-de "A man ..." --target "Ein Mann ..." --output attn.png
    python scripts/plot_attention.py attention runs/sentiment "정말 재미있는 영화였어요" --output attn.png
    python scripts/plot_attention.py positions --d_model 128 --length 64 --output pe.png

`attention` draws one panel per layer and head, tokens on both axes (queries down, keys across):
encoder self-attention, and for a seq2seq model also decoder self-attention and cross-attention
(`--kinds` picks). The decoder reads the start token and `--target` (its end token too), or, without one, the
model's own greedy translation (as long as the saved generation config allows). The pass is the attention
explorer's (`hf_transformer.attention_view`): a classifier reads a long text's first tokens, a translator's text
longer than the model reads is refused in one line.
`positions` draws the sinusoid table as the seed tutorial does (position on y, depth on x, RdBu).
(A training run's learning curves: `python -m recipes.common.plotting RUN_DIR --output curves.png`.)

Text is drawn with a CJK font when one is installed (Noto Sans CJK, Nanum Gothic, ...); otherwise
Hangul tokens show as boxes and one warning says so. It needs matplotlib (the ``train`` extra), imported when a
figure is drawn.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hf_transformer.commands import run_command
from hf_transformer.figures import figure_path, pyplot, save_figure, use_cjk_font
from hf_transformer.folders import check_output_file

if TYPE_CHECKING:
    from matplotlib.figure import Figure

logger = logging.getLogger("plot_attention")

KINDS = ("encoder", "decoder", "cross")
_KIND_TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}


def load_model(model_dir: str):
    """Model (eval mode), tokenizer and task (``seq2seq``, ``classification`` or ``masked-lm``), as the folder says
    (`hf_transformer.attention_view.load_folder`)."""
    from hf_transformer.attention_view import load_folder

    return load_folder(model_dir)


def attention_maps(model, tokenizer, sentence: str, target: str | None = None, *, task: str) -> dict:
    """Per-head attention probabilities of one sentence, as numpy arrays, with the tokens of both axes.

    The pass is the attention explorer's (`hf_transformer.attention_view.run_model`): the text read as the Predictor
    reads it (a classifier's cut to what the model reads; a translator's text or a target longer than that raises
    ``ValueError``), the decoder reading the start token and then ``target`` with its end token, or the model's own
    greedy output. Returns ``{"source_tokens", "target_tokens", "encoder", ...}``: one ``(heads, queries, keys)``
    array per layer for each kind the model has (``decoder`` and ``cross`` with a decoder).
    """
    from hf_transformer.attention_view import run_model

    run = run_model(model, tokenizer, task, sentence, target=target)
    maps = {
        "source_tokens": tokenizer.convert_ids_to_tokens(run.source_ids),
        "target_tokens": tokenizer.convert_ids_to_tokens(run.decoder_ids) if "decoder" in run.attentions else [],
    }
    for kind, layers in run.attentions.items():
        maps[kind] = [layer[0].float().cpu().numpy() for layer in layers]
    return maps


def plot_attention_maps(maps: dict, kinds: Sequence[str] = KINDS, title: str | None = None) -> tuple[Figure, list]:
    """One row per (kind, layer), one column per head. Returns the figure and its heatmap axes."""
    kinds = [kind for kind in kinds if kind in maps]
    if not kinds:
        raise ValueError(f"none of the attention kinds {list(KINDS)} is in the maps")
    axis_tokens = {
        "encoder": (maps["source_tokens"], maps["source_tokens"]),
        "decoder": (maps["target_tokens"], maps["target_tokens"]),
        "cross": (maps["target_tokens"], maps["source_tokens"]),
    }
    rows = [(kind, layer) for kind in kinds for layer in range(len(maps[kind]))]
    heads = maps[kinds[0]][0].shape[0]
    longest = max(len(maps["source_tokens"]), len(maps["target_tokens"]))
    side = max(2.2, 0.22 * longest + 1.0)
    figure, grid = pyplot().subplots(
        len(rows), heads, figsize=(side * heads + 1.0, side * len(rows) + 0.6), squeeze=False, layout="constrained"
    )
    image = None
    for row, (kind, layer) in enumerate(rows):
        queries, keys = axis_tokens[kind]
        for head in range(heads):
            axes = grid[row][head]
            image = axes.imshow(maps[kind][layer][head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            axes.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
            axes.set_yticks(range(len(queries)), queries, fontsize=7)
            axes.set_title(f"{_KIND_TITLES[kind]} | layer {layer + 1} head {head + 1}", fontsize=8)
    figure.colorbar(image, ax=grid, shrink=0.6, label="attention probability")
    if title:
        figure.suptitle(title)
    return figure, [axes for row in grid for axes in row]


# --------------------------------------------------------------------------------------------------
# Positions


def plot_positions(d_model: int = 128, length: int = 64) -> tuple[Figure, list]:
    """The sinusoid table (rows = positions 0..length-1, columns = dimensions), drawn like the seed tutorial."""
    from hf_transformer.modeling_transformer import sinusoid_table

    table = sinusoid_table(length, d_model).numpy()
    figure, axes = pyplot().subplots(figsize=(8, 5), layout="constrained")
    mesh = axes.pcolormesh(table, cmap="RdBu", vmin=-1.0, vmax=1.0)
    axes.set_xlabel("Depth")
    axes.set_xlim((0, d_model))
    axes.set_ylabel("Position")
    axes.set_title(f"Sinusoidal positional encoding (d_model {d_model}, {length} positions)")
    figure.colorbar(mesh, ax=axes)
    return figure, [axes]


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    attention = commands.add_parser("attention", help="per-head attention heatmaps of one sentence")
    attention.add_argument("model_dir")
    attention.add_argument("sentence")
    attention.add_argument("--target", default=None, help="decoder text (default: the model's greedy output)")
    attention.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    attention.add_argument("--output", required=True)

    positions = commands.add_parser("positions", help="the sinusoidal positional-encoding table")
    positions.add_argument("--d_model", type=int, default=128)
    positions.add_argument("--length", type=int, default=64)
    positions.add_argument("--output", required=True)

    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    numbers = {"--dpi": args.dpi}
    if args.command == "positions":
        numbers |= {"--d_model": args.d_model, "--length": args.length}
    wrong = [f"{option} {value}" for option, value in numbers.items() if value < 1]
    if wrong:
        parser.error(f"{', '.join(wrong)}: give 1 or more")
    try:
        output = check_output_file(figure_path(args.output))
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    font = use_cjk_font()

    if args.command == "attention":
        try:
            model, tokenizer, task = load_model(args.model_dir)
            maps = attention_maps(model, tokenizer, args.sentence, args.target, task=task)
            figure, panels = plot_attention_maps(maps, args.kinds, title=args.sentence)
        except (OSError, ValueError) as error:  # a folder, one without weights, a text too long, a setting
            parser.error(str(error).strip().splitlines()[0])
        except ImportError as error:  # a package the folder needs is not installed (its tokenizer's analyzer)
            parser.error(f"{args.model_dir}: {error}")
    else:
        figure, panels = plot_positions(args.d_model, args.length)
    size = tuple(int(round(v * args.dpi)) for v in figure.get_size_inches())
    output = save_figure(figure, output, dpi=args.dpi)
    logger.info("wrote %s (%d panels)", output, len(panels))
    return {"output": str(output), "panels": len(panels), "size": size, "font": font}


if __name__ == "__main__":
    run_command(main)
