#!/usr/bin/env bash
# The NSMC recipe's best model (recipes/nsmc/README.md): the main job, scripts/main_job.sh, with Korean morphemes
# (MeCab-ko) as the tokenizer's first cut, four times its pretraining steps, and the classifier's n-gram score over the
# morpheme pieces and the characters in one table. It installs the package's `morphemes` extra.
#
#   bash recipes/nsmc/best_model.sh [DATA_DIR] [OUTPUT_DIR]      (OUTPUT_DIR defaults to runs/nsmc-best)
set -euo pipefail
cd "$(dirname "$0")/../.."

MAIN_JOB_SEGMENTER=mecab-ko MAIN_JOB_PRETRAINING_STEPS=18000 MAIN_JOB_NGRAM_UNIT=token+character \
    exec bash scripts/main_job.sh "${1:-${HF_TRANSFORMER_DATA:-data}}" "${2:-runs/nsmc-best}"
