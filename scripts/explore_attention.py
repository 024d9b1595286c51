"""Write an interactive attention explorer of one sentence: one self-contained HTML page, to open in any browser.

    python scripts/explore_attention.py runs/m30k-en-de "A man is riding a bike." --output attention.html
    python scripts/explore_attention.py runs/m30k-en-de "A man ..." --target "Ein Mann ..." --output attention.html
    python scripts/explore_attention.py runs/m30k-en-de "A man ..." --num_beams 5 --output attention.html
    python scripts/explore_attention.py runs/nsmc "정말 재미있는 영화였어요" --output attention.html

The page shows encoder self-attention, and for a seq2seq model also decoder self-attention and cross-attention:
pick the kind, layer and head, hover a query token to read the weights it gives each key (as colour and as a
number), or see all heads at once. The decoder reads `--target`, or without one the model's own output (greedy,
or beam search with `--num_beams`). The page needs no network (inline JavaScript, the weights embedded).
Library: `hf_transformer.attention_view.attention_page`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers.utils import logging as transformers_logging

from hf_transformer.attention_view import attention_page
from hf_transformer.commands import run_command
from hf_transformer.folders import check_output_file


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a folder saved by this package (seq2seq, classifier or masked-LM)")
    parser.add_argument("text", help="the sentence to look at")
    parser.add_argument("--target", default=None, help="decoder text (default: the model's own output)")
    parser.add_argument("--num_beams", type=int, default=1, help="beam search for the model's own output")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="cap on the model's own output")
    parser.add_argument("--output", required=True, help="the HTML file to write")
    args = parser.parse_args(argv)
    try:
        output = check_output_file(args.output)
    except ValueError as error:
        parser.error(str(error))
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        page = attention_page(
            args.model_dir,
            args.text,
            target=args.target,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
        )
    except (OSError, ValueError) as error:  # a folder, one without weights or with damaged ones, a setting
        parser.error(str(error).strip().splitlines()[0])
    except ImportError as error:  # a package the folder needs is not installed (its tokenizer's analyzer)
        parser.error(f"{args.model_dir}: {error}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    print(f"wrote {output} ({len(page.encode('utf-8')) // 1024 + 1} KiB): open it in a browser")
    return output


if __name__ == "__main__":
    run_command(main)
