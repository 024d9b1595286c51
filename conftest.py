"""Settings every test of the repository runs under, the library's (tests/) and the recipes' (recipes/*/tests/)."""

import os

# Nothing is fetched from a hub during the tests: every model and dataset is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

# CTranslate2 reads CT2_USE_MKL when it is imported, and test modules import it while they are collected: the choice
# the package makes before it first imports CTranslate2 (hf_transformer.export.ctranslate2_export.prefer_mkl_for_int8,
# MKL's int8 products on an AMD CPU with AVX2 only) is made here first, so that the suite runs the engine as a user of
# the package gets it.
if os.environ.get("CT2_USE_MKL") is None:
    from hf_transformer.export.ctranslate2_export import prefer_mkl_for_int8

    prefer_mkl_for_int8()
