"""Command line: train a tokenizer, import a SentencePiece model, or show how text is split.

hf-transformer-tokenizer train corpus.txt more.txt --vocab-size 8000 --output tokenizers/my-vocab
hf-transformer-tokenizer train reviews.csv --text-column document --output tokenizers/reviews
hf-transformer-tokenizer import-sentencepiece kowiki.model --output tokenizers/kowiki
hf-transformer-tokenizer encode tokenizers/reviews "겨울은 추워요."

`python -m hf_transformer.tokenization ...` is the same command, and so is `python -m tokenizer ...` run from the
repository root (the top-level `tokenizer/` folder is a shim that calls `main` here).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .train import DEFAULT_MODEL_MAX_LENGTH, MODEL_TYPES, SEGMENTERS, train_tokenizer

logger = logging.getLogger("hf_transformer.tokenization")

STRUCTURED_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json"}


def _structured_texts(paths: list[str], text_column: str | None) -> Iterator[str]:
    import datasets

    if text_column is None:
        raise SystemExit(f"--text-column is needed to read {paths[0]}: which column holds the text?")
    builders = {STRUCTURED_SUFFIXES[Path(path).suffix.lower()] for path in paths}
    if len(builders) != 1:
        raise SystemExit("give CSV/TSV files or JSON/JSONL files, not both")
    options = {"delimiter": "\t"} if all(path.lower().endswith(".tsv") for path in paths) else {}
    if builders == {"csv"}:
        options["keep_default_na"] = False
    dataset = datasets.load_dataset(builders.pop(), data_files=paths, split="train", **options)
    if text_column not in dataset.column_names:
        raise SystemExit(f"no column {text_column!r} in {paths}; the columns are {dataset.column_names}")
    yield from (text for text in dataset[text_column] if text)


def _training_input(args: argparse.Namespace):
    if not args.files:
        raise SystemExit("nothing to train on: give text files (one sentence per line) or CSV/TSV/JSON(L) files")
    missing = [path for path in args.files if not Path(path).is_file()]
    if missing:
        raise SystemExit(f"file(s) not found: {missing}")
    structured = [path for path in args.files if Path(path).suffix.lower() in STRUCTURED_SUFFIXES]
    if structured:
        if len(structured) != len(args.files):
            raise SystemExit("mix of plain text and CSV/TSV/JSON files: train on one kind at a time")
        return list(_structured_texts(args.files, args.text_column))
    if args.text_column is not None:
        raise SystemExit(f"--text-column names a column of CSV/TSV/JSON files; {args.files[0]} is plain text")
    return [Path(path) for path in args.files]  # plain text: one sentence per line, read by the Rust trainer


def _show(tokenizer, text: str) -> str:
    ids = tokenizer(text)["input_ids"]
    return f"{text!r}\n  pieces: {' / '.join(tokenizer.convert_ids_to_tokens(ids))}\n  ids:    {ids}"


def command_train(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    texts_or_files = _training_input(args)
    read = time.perf_counter() - started
    if isinstance(texts_or_files, list) and texts_or_files and isinstance(texts_or_files[0], str):
        logger.info("read %d texts in %.1f s", len(texts_or_files), read)
    started = time.perf_counter()
    tokenizer = train_tokenizer(
        texts_or_files,
        args.vocab_size,
        model_type=args.model,
        model_max_length=args.model_max_length,
        lowercase=args.lowercase,
        segmenter=args.segmenter,
        show_progress=not args.quiet,
        save_directory=args.output,
    )
    logger.info(
        "trained a %s vocabulary of %d pieces in %.1f s; saved to %s",
        args.model,
        len(tokenizer),
        time.perf_counter() - started,
        args.output,
    )
    for sample in args.sample or []:
        print(_show(tokenizer, sample))


def command_import(args: argparse.Namespace) -> None:
    from .sentencepiece_import import import_sentencepiece

    try:
        tokenizer = import_sentencepiece(
            args.model_file, model_max_length=args.model_max_length, save_directory=args.output
        )
    except ImportError as error:
        raise SystemExit(str(error)) from None
    logger.info("imported %s (%d pieces); saved to %s", args.model_file, len(tokenizer), args.output)


def command_encode(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    from ..folders import looks_like_a_path
    from ..saved_folder import TOKENIZER_FILES, tokenizer_place

    folder = Path(args.tokenizer_dir)
    if not folder.exists() and looks_like_a_path(args.tokenizer_dir):
        raise FileNotFoundError(f"no tokenizer folder at {args.tokenizer_dir}")
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{args.tokenizer_dir} is a file: give the tokenizer's folder")
    if folder.is_dir() and tokenizer_place(folder) is None:
        raise FileNotFoundError(f"{args.tokenizer_dir} holds no tokenizer ({' or '.join(TOKENIZER_FILES)})")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    for text in args.texts:
        print(_show(tokenizer, text))


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """`prog` names the command in the usage line; None: the program name argparse reads from sys.argv[0]."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or log lines")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a vocabulary and save it as a tokenizer folder")
    train.add_argument("files", nargs="*", help="text files (one sentence per line) or CSV/TSV/JSON(L) files")
    train.add_argument("--text-column", help="the text column of CSV/TSV/JSON files")
    train.add_argument("--output", "-o", required=True, help="folder to save the tokenizer to")
    train.add_argument("--vocab-size", type=int, default=8000, help="whole vocabulary, special tokens included")
    train.add_argument("--model", choices=MODEL_TYPES, default="unigram")
    train.add_argument("--model-max-length", type=int, default=DEFAULT_MODEL_MAX_LENGTH)
    train.add_argument("--lowercase", action="store_true", help="the tokenizer lowercases every text it encodes")
    train.add_argument(
        "--segmenter", choices=SEGMENTERS, help="cut every text into Korean morphemes first (the morphemes extra)"
    )
    train.add_argument("--sample", action="append", help="text to show split after training (repeatable)")
    train.set_defaults(run=command_train)

    spm = commands.add_parser("import-sentencepiece", help="convert a SentencePiece .model file")
    spm.add_argument("model_file")
    spm.add_argument("--output", "-o", required=True)
    spm.add_argument("--model-max-length", type=int, default=DEFAULT_MODEL_MAX_LENGTH)
    spm.set_defaults(run=command_import)

    encode = commands.add_parser("encode", help="show the pieces and ids of some text")
    encode.add_argument("tokenizer_dir")
    encode.add_argument("texts", nargs="+")
    encode.set_defaults(run=command_encode)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        args.run(args)
    except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
