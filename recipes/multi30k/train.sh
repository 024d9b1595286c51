#!/usr/bin/env bash
# The best single-model Multi30k recipe (recipes/multi30k/README.md), in one command, for either direction:
#   train the shared 8k tokenizer -> train a d_model-256 3+3-layer Transformer from scratch on the 29,000 training
#   pairs -> average the last eight epochs' weights -> choose beam 5's length penalty on validation -> score test2016
#   (cased sacreBLEU and lowercased Moses-tokenised BLEU) -> save the model folder with its test output.
#
#   bash recipes/multi30k/train.sh SOURCE_LANG TARGET_LANG [DATA_DIR] [OUTPUT_DIR] [TRAINING OPTIONS...]
#
# SOURCE_LANG TARGET_LANG: en de or de en. DATA_DIR holds multi30k/ (default: $HF_TRANSFORMER_DATA, else ./data);
# OUTPUT_DIR defaults to runs/m30k-SOURCE-TARGET. Options after OUTPUT_DIR go to recipes.multi30k.train after the
# recipe's own, so that a later one wins (a distilled student's, recipes/multi30k/README.md). Needs the package with
# its `train` extra (sacreBLEU, sacremoses): pip install -e ".[train]" (the README's test install has it); .venv is
# used unless another environment is active.
# Both directions side by side on a 2-core machine: one thread each (OMP_NUM_THREADS=1), about 100 minutes each with
# bfloat16 arithmetic, about 115 in float32 on a CPU with AVX-512 and twice that on an AVX2-only one
# (recipes/multi30k/records/notes.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
. recipes/multi30k/args.sh "$@"  # .venv, source_lang, target_lang, data_dir
output_dir=${4:-runs/m30k-$source_lang-$target_lang}

. recipes/common/wait_policy.sh  # passive OpenMP waiting where other processes keep the cores busy

# bfloat16 autocast where it trains this model faster on this machine (at the thread count the training will have),
# else float32 (recipes/common/precision_args.sh; the shape of the model below, sentences of about 32 tokens).
. recipes/common/precision_args.sh --task seq2seq --vocab_size 8000 --max_length 32 --batch_size 64 \
    --d_model 256 --num_layers 3 --num_heads 4 --intermediate_size 1024

# The paper's model (post-LN, sinusoidal positions, ReLU, label smoothing 0.1, Adam 0.9/0.98) at d_model 256, 3+3
# layers, 4 heads, feed-forward 1024, one token table; dropout 0.2; 20 epochs of batch 64, peak lr 1e-3 after 800
# warm-up steps, then decaying linearly to zero at the last step (above the paper's inverse square root decay on
# validation in both directions, recipes/multi30k/records/notes.md); a checkpoint each epoch, the scored weights the
# mean of the last 8; greedy validation BLEU every 4 epochs (1,816 steps) to watch the run.
python -m recipes.multi30k.train \
    --output_dir "$output_dir" --data_dir "$data_dir" --source_lang "$source_lang" --target_lang "$target_lang" \
    --vocab_size 8000 --dropout 0.2 --attention_dropout 0.1 \
    --num_train_epochs 20 --per_device_train_batch_size 64 --per_device_eval_batch_size 128 \
    --learning_rate 1e-3 --warmup_steps 800 --lr_scheduler_type linear \
    --train_sampling_strategy group_by_length \
    --eval_strategy steps --eval_steps 1816 --save_strategy epoch --save_total_limit 8 --average_checkpoints 8 \
    --num_beams 5 --length_penalty 1.0 1.4 1.8 \
    --logging_steps 100 --report_to none --seed 42 --disable_tqdm true \
    "${precision_args[@]}" "${@:5}"
