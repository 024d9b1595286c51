"""`python -m hf_transformer.tokenization train ...`: the tokenizer command line (see `cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m hf_transformer.tokenization"))
