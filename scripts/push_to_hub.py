#!/usr/bin/env python
"""Upload a trained model folder to the Hugging Face Hub: weights, tokenizer, code and a model card.

    python scripts/push_to_hub.py runs/demo/model --repo_id your-name/transformer-demo \\
        --language en --dataset your-name/data --metric exact_match --results runs/demo/results.json
    python scripts/push_to_hub.py MODEL_DIR --repo_id your-name/model --dry-run out/   # write, do not upload
    python scripts/push_to_hub.py MODEL_DIR --repo_id your-name/model --space_dir space/   # and a demo Space

MODEL_DIR is a folder written by ``save_pretrained``. The tokenizer is taken from ``--tokenizer`` or from
MODEL_DIR. Evaluation results are read from ``all_results.json``, ``eval_results.json``,
``test_results.json`` and ``results.json`` in MODEL_DIR and from ``--results``. The uploaded folder holds
``config.json`` with ``auto_map`` and the configuration and modeling source, so the model loads with
``trust_remote_code=True`` where ``hf_transformer`` is not installed. The card's pipeline tag follows the model's
head (a seq2seq model tagged ``--tag translation`` is a translation model). A model fine-tuned from another folder
(``--init_from``) names that model's Hub id with ``--base_model`` (the card's ``base_model``); the card's usage
snippet loads the model from ``--repo_id``.

Uploading needs a token (``hf auth login`` or ``HF_TOKEN``) and a connection; without them the script
stops before uploading anything. ``--dry-run OUT_DIR`` writes the exact folder that would be uploaded.
``--space_dir DIR`` also writes a Hugging Face Space there (``hf_transformer.hub.write_space``: ``app.py``,
``requirements.txt``, ``README.md``, the package's source) whose demo app loads the model from ``--repo_id``; it
is written, never uploaded: ``hf upload --repo-type space SPACE_ID DIR`` does that.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from hf_transformer import hub
from hf_transformer.commands import run_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="folder written by save_pretrained")
    parser.add_argument("--repo_id", "--repo-id", required=True, help="NAMESPACE/NAME on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", default=None, help="branch to upload to (created if missing); default main")
    parser.add_argument("--commit_message", "--commit-message", default="Upload hf_transformer model")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder, if it is not MODEL_DIR")
    parser.add_argument("--results", action="append", default=[], help="extra JSON file of evaluation results")
    parser.add_argument("--license", default="apache-2.0")
    parser.add_argument("--language", action="append", default=[], help="ISO 639-1 code; repeat for several")
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        help="extra tag; repeatable (a seq2seq model tagged translation gets the translation pipeline tag)",
    )
    parser.add_argument("--dataset", action="append", default=[], help="Hub dataset id; repeatable")
    parser.add_argument("--metric", action="append", default=[], help="metric id, e.g. bleu; repeatable")
    parser.add_argument("--example", default=hub.DEFAULT_EXAMPLE, help="input text of the card's usage snippet")
    parser.add_argument(
        "--base_model",
        "--base-model",
        default=None,
        help="Hub id of the model MODEL_DIR was fine-tuned from (its --init_from folder, once uploaded): the card's "
        "base_model",
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        metavar="OUT_DIR",
        default=None,
        help="write the folder that would be uploaded into OUT_DIR and upload nothing",
    )
    parser.add_argument(
        "--space_dir",
        "--space-dir",
        metavar="DIR",
        default=None,
        help="also write a Space (app.py, requirements.txt, ...) whose demo app loads REPO_ID into DIR; not uploaded",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    text = hub.CardText(
        license=args.license,
        language=args.language,
        tags=args.tag,
        datasets=args.dataset,
        metrics=args.metric,
        example=args.example,
        base_model=args.base_model,
    )

    def prepare(out_dir) -> Path:
        try:
            return hub.prepare_folder(
                args.model_dir,
                out_dir,
                args.repo_id,
                tokenizer_dir=args.tokenizer,
                results_files=args.results,
                text=text,
            )
        except ImportError as error:  # a package the folder's tokenizer needs to load (its analyzer) is not installed
            raise SystemExit(f"push_to_hub: {args.model_dir}: {error}") from None

    if args.space_dir:
        hub.check_space_dir(args.space_dir)  # before any work; the Space is written once the model's folder is
    local_base = hub.local_base_model(args.model_dir)
    if local_base and not args.base_model:
        print(
            f"note: {args.model_dir} was fine-tuned from the folder {local_base}; give --base_model with its Hub id "
            "to name it in the card"
        )
    if hub.find_tokenizer(args.model_dir, args.tokenizer) is None:
        print(f"note: no tokenizer in {args.model_dir} and no --tokenizer; the card's usage snippet feeds token ids")
    if args.dry_run:
        folder = prepare(args.dry_run)
        print(f"dry run: wrote the folder for {args.repo_id} to {folder}; nothing was uploaded")
        for path in sorted(folder.iterdir()):
            print(f"  {path.name}")
        write_space(args)
        return

    try:
        token = hub.check_can_upload()
    except hub.HubError as error:
        raise SystemExit(f"push_to_hub: {error}") from None
    with tempfile.TemporaryDirectory() as tmp:
        folder = prepare(Path(tmp) / "upload")
        url = hub.upload(
            folder,
            args.repo_id,
            token=token,
            private=args.private,
            revision=args.revision,
            commit_message=args.commit_message,
        )
    print(f"uploaded {args.model_dir} to {url}" + (f" (branch {args.revision})" if args.revision else ""))
    write_space(args)


def write_space(args) -> None:
    """The Space of the model's repo, where --space_dir asks for it (written last: nothing is left where the folder
    could not be prepared or uploaded)."""
    if args.space_dir:
        space = hub.write_space(args.repo_id, args.space_dir)
        print(f"wrote a Space for {args.repo_id} to {space}, not uploaded (hf upload --repo-type space ID {space})")


if __name__ == "__main__":
    run_command(main)
