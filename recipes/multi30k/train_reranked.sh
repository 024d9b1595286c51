#!/usr/bin/env bash
# Both Multi30k directions with the anchor's small model, each reranked with the other as its noisy channel:
#   per direction, train the 8k Unigram tokenizer and a d_model-128 4+4-layer Transformer from scratch on the 29,000
#   training pairs (En->De and De->En side by side) -> average the last epochs' weights -> beam 5 with the length
#   penalty chosen on validation, test2016 scored -> then each direction's 5-best lists rescored with the other
#   direction's model (recipes.multi30k.rerank: channel weight and length exponent chosen on validation,
#   test2016 scored once, cased sacreBLEU and lowercased Moses-tokenised BLEU).
#
#   bash recipes/multi30k/train_reranked.sh [DATA_DIR] [OUTPUT_DIR]
#
# DATA_DIR holds multi30k/ (default: $HF_TRANSFORMER_DATA, else ./data); OUTPUT_DIR (default runs/m30k-reranked) gets
# en-de/ and de-en/ (model folders with their own beam-search scores), en-de-reranked/ and de-en-reranked/ (results.json
# and test_predictions.txt of the reranked output) and a log per step. Needs the package with its `train` extra;
# .venv is used unless another environment is active. Float32 throughout: on a CPU this small model gains nothing
# from bfloat16 (recipes/multi30k/records/notes.md), and the GPU runs reported were float32.
# On a GPU: the anchor's recipe in full, 110 epochs of 512 sentences (m30k-*-anchor-gpu in the records: on one H200
# En->De's training took 342 s beside De->En's, which had reached epoch 101 when stopped at 385 s), then the
# reranking. On a CPU: 16 epochs of 128 sentences, one thread per direction; on two cores of an AVX2-only AMD EPYC the
# whole job took 85 minutes (m30k-*-reranked-job: training 70, scoring 7-10, reranking about 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then
    . .venv/bin/activate
fi
data_dir=${1:-${HF_TRANSFORMER_DATA:-data}}
output_dir=${2:-runs/m30k-reranked}
mkdir -p "$output_dir"

# The anchor's model (Wu et al., 2021, transformer_tiny): d_model 128, 4+4 layers, 4 heads, feed-forward 256,
# dropout 0.3 without attention dropout, one 8k Unigram token table; a checkpoint each epoch.
model_args=(--vocab_size 8000 --d_model 128 --num_layers 4 --num_heads 4 --intermediate_size 256 --dropout 0.3 \
    --attention_dropout 0.0)
# On a GPU, its schedule: 512 sentences a step (about its update size), peak lr 5e-3 after 2,000 warm-up steps,
# 110 epochs, the mean of the last ten; greedy validation BLEU three times to watch the run.
gpu_schedule=(--num_train_epochs 110 --per_device_train_batch_size 512 --per_device_eval_batch_size 256 \
    --learning_rate 5e-3 --warmup_steps 2000 --save_total_limit 10 --average_checkpoints 10 \
    --eval_strategy steps --eval_steps 2090 --logging_steps 570 --dataloader_num_workers 4)
# On a CPU, what fits about an hour at one thread: 128 sentences a step, peak lr 4e-3 after 1,500 warm-up steps,
# 16 epochs, the mean of the last six.
cpu_schedule=(--num_train_epochs 16 --per_device_train_batch_size 128 --per_device_eval_batch_size 128 \
    --learning_rate 4e-3 --warmup_steps 1500 --save_total_limit 6 --average_checkpoints 6 \
    --eval_strategy no --logging_steps 100 --use_cpu true)

. recipes/common/wait_policy.sh  # passive OpenMP waiting where other processes keep the cores busy
device=$(python -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
if [ "$device" = cuda ]; then
    schedule=("${gpu_schedule[@]}")
else
    schedule=("${cpu_schedule[@]}")
    export OMP_NUM_THREADS=1  # one core per direction
fi

# Runs the two directions' commands side by side ($1: train or rerank); once both have ended, a failure stops the
# job, its log saying why.
both_directions() {
    local pids=() failed=0 source_lang target_lang
    for pair in en-de de-en; do
        source_lang=${pair%-*}
        target_lang=${pair#*-}
        "$1" > "$output_dir/$1-$pair.log" 2>&1 &
        pids+=($!)
        echo "$1 $source_lang->$target_lang (pid $!), its log: $output_dir/$1-$pair.log"
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
    if [ "$failed" = 1 ]; then
        echo "$1 failed in a direction: see $output_dir/$1-*.log" >&2
        exit 1
    fi
}

train() {
    python -m recipes.multi30k.train \
        --output_dir "$output_dir/$source_lang-$target_lang" --data_dir "$data_dir" \
        --source_lang "$source_lang" --target_lang "$target_lang" "${model_args[@]}" "${schedule[@]}" \
        --train_sampling_strategy group_by_length --save_strategy epoch --save_only_model true \
        --num_beams 5 --length_penalty 1.0 1.4 1.8 --report_to none --seed 42 --disable_tqdm true
}

# The reverse direction's model as the channel p(source | candidate); 5-best lists, the weights chosen on validation
# from the script's grid.
rerank() {
    python -m recipes.multi30k.rerank \
        --model_dirs "$output_dir/$source_lang-$target_lang" --channel_model_dirs "$output_dir/$target_lang-$source_lang" \
        --output_dir "$output_dir/$source_lang-$target_lang-reranked" --data_dir "$data_dir" \
        --source_lang "$source_lang" --target_lang "$target_lang" --num_candidates 5 --device "$device"
}

both_directions train
both_directions rerank
grep -h "test2016 reranked" "$output_dir"/rerank-*.log
