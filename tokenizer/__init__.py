"""Shim: the tokenizer library lives in `hf_transformer.tokenization`; this folder only re-exports it.

Why a shim: `tokenizer` is also the name of an unrelated package on PyPI (`pip install tokenizer`), so the
installed distribution must not claim that top-level name, or installing both would break one of them. The
hf_transformer distribution therefore installs only `hf_transformer*` (setup.cfg, [options.packages.find]), and
this folder is not installed: it keeps `from tokenizer import ...` and `python -m tokenizer ...` working when
run from the repository root (the current directory is on sys.path). Installed code, scripts and tests import
`hf_transformer.tokenization`; the installed command is `hf-transformer-tokenizer`.
"""

from hf_transformer.tokenization import *  # noqa: F403  (the shim re-exports the public API as it is)
from hf_transformer.tokenization import __all__  # noqa: F401
