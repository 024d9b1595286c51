#!/usr/bin/env python
"""Convert a checkpoint of the seed tutorial's Transformer or of the book-style encoder into a model folder.

    python scripts/convert_checkpoint.py --from seed model.pth config.json out/
    python scripts/convert_checkpoint.py --from book encoder.pt bert_config.json out/

CHECKPOINT is a ``torch.save``d state dict, or a dict holding one under ``state_dict`` (the tutorial's
``save`` format, next to ``epoch`` and ``loss``). ``--prefix transformer.`` converts the keys under that
prefix, e.g. the ``Transformer`` inside the tutorial's classifier; the keys left out are listed.
CONFIG is the JSON config the checkpoint was trained with. OUT_DIR, a new or empty folder (``--force`` writes into
one that holds files), receives ``config.json`` and the weights; after ``import hf_transformer``,
``AutoModel.from_pretrained(OUT_DIR)`` loads them.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import torch

from hf_transformer.commands import run_command
from hf_transformer.convert import from_book, from_seed

CONVERTERS = {"seed": from_seed, "book": from_book}


def load_state_dict(path: str | Path, prefix: str = "") -> tuple[dict[str, torch.Tensor], list[str]]:
    """The state dict in ``path`` restricted to ``prefix`` (stripped), and the keys left out."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:  # never unpickled as code: a file from elsewhere may run anything
        first = str(error).strip().splitlines()[0]
        raise ValueError(
            f"{path}: holds objects beside its tensors that are not read without running their code ({first}). "
            "Where the file is your own, save its state_dict alone: torch.save(checkpoint['state_dict'], path)."
        ) from None
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path}: expected a state dict (or a dict with 'state_dict'), got {type(checkpoint)}.")
    if not prefix:
        return dict(checkpoint), []
    selected = {key[len(prefix) :]: value for key, value in checkpoint.items() if key.startswith(prefix)}
    if not selected:
        raise ValueError(f"{path}: no key starts with the prefix {prefix!r}.")
    return selected, sorted(key for key in checkpoint if not key.startswith(prefix))


def read_config(path: str | Path) -> dict:
    """The JSON object in ``path``; ``ValueError`` naming the file where it holds something else."""
    with open(path, encoding="utf-8") as handle:
        try:
            config = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not a JSON file ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object of settings, got a {type(config).__name__}")
    return config


def check_out_dir(out_dir: Path, force: bool) -> None:
    """``ValueError`` where ``out_dir`` cannot take the converted folder: a file, or a folder that already holds
    files (another model's would be written over, or mixed with this one's) unless ``force``."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} is a file: give the folder to write the converted model to")
    held = sorted(path.name for path in out_dir.iterdir()) if out_dir.is_dir() else []
    if held and not force:
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise ValueError(f"{out_dir} already holds files ({shown}): give a new or empty folder, or --force")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", choices=sorted(CONVERTERS), required=True, help="checkpoint family")
    parser.add_argument("--prefix", default="", help="convert only the keys under this prefix (stripped)")
    parser.add_argument("checkpoint", help="torch.save'd state dict")
    parser.add_argument("config", help="JSON config of the checkpoint")
    parser.add_argument("out_dir", help="a new or empty folder to write the converted model to")
    parser.add_argument("--force", action="store_true", help="write into OUT_DIR even where it already holds files")
    args = parser.parse_args(argv)

    try:
        check_out_dir(Path(args.out_dir), args.force)
        state_dict, left_out = load_state_dict(args.checkpoint, args.prefix)
        config = read_config(args.config)
    except (OSError, ValueError) as error:  # a missing file, one that is no state dict or config, the folder: one line
        parser.error(str(error))
    if left_out:
        print(f"Not converted (outside --prefix {args.prefix!r}): {', '.join(left_out)}", file=sys.stderr)
    model = CONVERTERS[args.source](state_dict, config)
    model.save_pretrained(args.out_dir)
    print(f"Wrote {type(model).__name__} ({sum(p.numel() for p in model.parameters()):,} parameters) to {args.out_dir}")
    if args.source == "book":
        print("The decoder is freshly initialised: only the encoder comes from the checkpoint.")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
