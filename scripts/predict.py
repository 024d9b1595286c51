"""Classify or translate text with any saved model folder (or Hub id), loaded through the Auto classes.

    python scripts/predict.py runs/nsmc "정말 재미있는 영화였어요" "시간이 아깝다"
    python scripts/predict.py runs/multi30k-en-de --num_beams 4 < sentences.txt
    echo "A man is riding a bike." | python scripts/predict.py runs/multi30k-en-de --json

The head comes from `config.architectures`: a sequence classifier prints `label<TAB>score<TAB>text`
per input, a seq2seq model prints one translation per line. Without TEXT arguments every line of stdin (or of
`--input FILE`) is an input, and the results are written line for line (a blank line for a blank one); `--output
FILE` writes them there, with a progress bar.
`--json` prints one JSON object per input instead (classifiers: every label's score). Scores are what
transformers' text-classification pipeline gives: softmax probabilities, a sigmoid per label for a multi-label
or one-label classifier, the value itself for regression. Inputs longer than
the model's position table (or the tokenizer's `model_max_length`, if smaller) are truncated.
`--engine ctranslate2` decodes with CTranslate2. The work is done by `hf_transformer.Predictor`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_transformer.commands import run_command
from hf_transformer.folders import ADAPTER_CONFIG, FolderTaskError, check_output_file, looks_like_a_path
from hf_transformer.inference import Predictor, check_device, format_result, read_lines


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a saved model folder (with its tokenizer) or a Hub id")
    parser.add_argument("texts", nargs="*", help="inputs; without any, lines are read from stdin")
    parser.add_argument("--num_beams", type=positive_int, default=None, help="beam size (default: the model's own)")
    parser.add_argument("--max_new_tokens", type=positive_int, default=None, help="longest translation in tokens")
    parser.add_argument("--length_penalty", type=float, default=None, help="beam length penalty (default: the model's)")
    parser.add_argument(
        "--batch_size", type=positive_int, default=32, help="inputs per batch (batches are grouped by length)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps ...")
    parser.add_argument(
        "--engine", choices=("torch", "ctranslate2"), default="torch",
        help="ctranslate2: decode with CTranslate2 (a folder from hf_transformer.export, or a saved folder converted "
        "on the fly); needs the export extra",
    )  # fmt: skip
    parser.add_argument("--quantization", default=None, help="with --engine ctranslate2 on a saved folder: int8, ...")
    parser.add_argument(
        "--compute_type", default=None,
        help="with --engine ctranslate2: the type it computes in (GPU: float16, bfloat16, int8_float16; CPU: int8); "
        "default: the weights' own",
    )  # fmt: skip
    parser.add_argument("--input", default=None, help="a text file, one input per line (instead of TEXT or stdin)")
    parser.add_argument("--output", default=None, help="write the results to this file (a progress bar shows)")
    parser.add_argument("--json", action="store_true", help="one JSON object per input")
    return parser


def read_inputs(args, parser) -> list[str]:
    """The texts: the arguments, else --input's lines, else stdin's; a wrong folder, device or mix refused first."""
    folder = Path(args.model_dir)
    if not folder.is_dir() and looks_like_a_path(args.model_dir):
        parser.error(f"{args.model_dir}: no such model folder")
    if folder.is_dir() and not any((folder / name).is_file() for name in ("config.json", ADAPTER_CONFIG)):
        parser.error(f"{args.model_dir}: not a model folder: it has no config.json (nor {ADAPTER_CONFIG})")
    if args.input and args.texts:
        parser.error("give TEXT arguments or --input, not both")
    try:
        check_device(args.device, args.engine)
    except ValueError as error:
        parser.error(str(error))
    if args.output:
        try:
            check_output_file(args.output, inputs=[args.input])
        except ValueError as error:
            parser.error(str(error))
    if args.input:
        try:
            with open(args.input, encoding="utf-8") as stream:
                return read_lines(stream)
        except UnicodeDecodeError as error:
            parser.error(f"--input {args.input} is not UTF-8 text ({error.reason}): save it as UTF-8")
        except OSError as error:  # no such file, a folder
            parser.error(f"--input {args.input}: {error.strerror or error}")
    return args.texts or read_lines(sys.stdin)


def load_predictor(args, parser) -> Predictor:
    """The folder's Predictor; a name that is neither a folder nor a Hub model that loads is refused in one line."""
    try:
        return Predictor.from_pretrained(
            args.model_dir,
            device=args.device,
            engine=args.engine,
            quantization=args.quantization,
            compute_type=args.compute_type,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
            length_penalty=args.length_penalty,
            batch_size=args.batch_size,
        )
    except FolderTaskError as error:  # a folder of a class it does not serve (a masked-token model)
        parser.error(str(error))
    except ImportError as error:  # a package the folder needs is not installed (its tokenizer's analyzer, an engine)
        parser.error(f"{args.model_dir}: {error}")
    except (OSError, ValueError, TypeError) as error:
        # One line: a message of several lines (a config's field and its reason) joined, not cut to its first.
        first_line = " ".join(line.strip() for line in str(error).strip().splitlines()) or type(error).__name__
        if Path(args.model_dir).is_dir():  # a folder that exists but does not load: what went wrong, in one line
            parser.error(f"{args.model_dir}: {first_line}")
        parser.error(f"{args.model_dir}: no such model folder, and not a Hub model that loads here ({first_line})")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argument_parser()
    # Intermixed: options may come after or between the texts (`predict.py runs/x "a text" --json`).
    args = parser.parse_intermixed_args(argv)
    texts = read_inputs(args, parser)
    predictor = load_predictor(args, parser)
    try:
        results = predictor(texts, progress=args.output is not None)
    finally:
        predictor.close()
    lines = "".join(format_result(result, as_json=args.json) + "\n" for result in results)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(lines, encoding="utf-8")
    else:
        sys.stdout.write(lines)
    return results


if __name__ == "__main__":
    run_command(main)
