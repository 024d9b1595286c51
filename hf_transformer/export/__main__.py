"""`python -m hf_transformer.export {onnx,ctranslate2} MODEL_DIR OUTPUT_DIR`: see hf_transformer.export."""

from __future__ import annotations

import argparse
import sys

from ..commands import run_command
from . import to_ctranslate2, to_onnx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_transformer.export", description=__doc__)
    engines = parser.add_subparsers(dest="engine", required=True)
    onnx = engines.add_parser("onnx", help="ONNX graphs for ONNX Runtime (encoder, decoder with past, classifier)")
    ct2 = engines.add_parser("ctranslate2", help="a CTranslate2 model folder (seq2seq folders)")
    for sub in (onnx, ct2):
        sub.add_argument("model_dir", help="a folder written by save_pretrained (with its tokenizer)")
        sub.add_argument("output_dir", help="where the exported model goes")
    ct2.add_argument(
        "--quantization",
        default=None,
        help="CTranslate2 weight type: int8 (7-bit weights), int8_float32, int16, float16, ...",
    )
    onnx.add_argument(
        "--quantization", default=None, choices=["int8"], help="int8: ONNX Runtime's dynamic quantization of the graphs"
    )
    ct2.add_argument("--force", action="store_true", help="overwrite an existing output folder")
    onnx.add_argument("--force", action="store_true", help="write into an output folder that already holds files")
    args = parser.parse_args(argv)
    export = to_onnx if args.engine == "onnx" else to_ctranslate2
    try:
        output = export(args.model_dir, args.output_dir, quantization=args.quantization, force=args.force)
    except (OSError, ValueError) as error:
        # What the user can mend (a folder, one without weights, an existing output, a setting), said in one line.
        parser.error(str(error).strip().splitlines()[0])
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
