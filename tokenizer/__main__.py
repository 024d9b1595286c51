"""Shim: `python -m tokenizer ...` from the repository root runs `hf_transformer.tokenization`'s command line.

The installed command is `hf-transformer-tokenizer` (or `python -m hf_transformer.tokenization`); see
tokenizer/__init__.py for why this top-level folder is not installed.
"""

import sys

from hf_transformer.tokenization.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m tokenizer"))
