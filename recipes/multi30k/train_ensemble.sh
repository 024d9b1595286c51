#!/usr/bin/env bash
# Multi30k models trained side by side and decoded as one ensemble, either direction:
#   train the shared 8k Unigram tokenizer -> train d_model-256 3+3-layer Transformers from scratch on the 29,000
#   training pairs with the recipe of recipes/multi30k/train.sh (seeds 42 and 43 by default, one thread each, both at
#   once) -> average each one's last eight epochs -> score them as one ensemble (the log of their mean next-token
#   probability): beam 5's length penalty chosen on validation, then test2016 once (cased sacreBLEU and lowercased
#   Moses-tokenised BLEU).
#
#   bash recipes/multi30k/train_ensemble.sh SOURCE_LANG TARGET_LANG [DATA_DIR] [OUTPUT_DIR]
#
# SOURCE_LANG TARGET_LANG: en de or de en. DATA_DIR holds multi30k/ (default: $HF_TRANSFORMER_DATA, else ./data);
# OUTPUT_DIR (default runs/m30k-SOURCE-TARGET-ensemble) gets tokenizer/, member-42/ and member-43/ (each a model
# folder with its own scores) and the ensemble's results.json and test_predictions.txt. ENSEMBLE_SEEDS="42 43 44"
# trains and scores three members (or any other seeds); SMALL_MEMBER=1 adds member-small/, the anchor's small model on
# its GPU schedule (below); no more members train at once than the machine has cores.
# Needs the package with its `train` extra; .venv is used unless another environment is active. About 2 hours on a
# 2-core machine with AVX-512: each member takes one core for about 115-130 minutes in float32, the scoring about 15
# (a third member: 2 hours more; recipes/multi30k/records/notes.md).
# With both directions' ensembles trained, each reranked with the other as its noisy channel scores higher still
# (recipes/multi30k/README.md; an ensemble's folder stands for its members, at the length penalty its scoring chose):
#   python -m recipes.multi30k.rerank --model_dirs runs/m30k-en-de-ensemble \
#       --channel_model_dirs runs/m30k-de-en-ensemble --output_dir runs/m30k-en-de-ensemble-reranked \
#       --data_dir DATA_DIR --source_lang en --target_lang de --num_candidates 20 --mbr_scales 0 0.25 0.5 1 2
#   (De->En: --num_candidates 10; the README has both)
set -euo pipefail
cd "$(dirname "$0")/../.."
. recipes/multi30k/args.sh "$@"  # .venv, source_lang, target_lang, data_dir
output_dir=${4:-runs/m30k-$source_lang-$target_lang-ensemble}
case "${SMALL_MEMBER:-0}" in
    0 | 1) ;;
    *) echo "SMALL_MEMBER is 1 (add the small member) or 0, not '$SMALL_MEMBER'" >&2; exit 2 ;;
esac
mkdir -p "$output_dir"

# Each member trains at one thread, beside the others.
export OMP_NUM_THREADS=1

. recipes/common/wait_policy.sh  # passive OpenMP waiting where other processes keep the cores busy

# bfloat16 autocast where it trains a member faster on this machine at one thread, else float32
# (recipes/common/precision_args.sh; the members' shape, sentences of about 32 tokens).
. recipes/common/precision_args.sh --task seq2seq --vocab_size 8000 --max_length 32 --batch_size 64 \
    --d_model 256 --num_layers 3 --num_heads 4 --intermediate_size 1024

# One tokenizer for all members (an ensemble's members read and write the same tokens): Unigram, 8,000 pieces from
# both sides of the training pairs (each pair's English sentence, then its German one).
python -m recipes.multi30k.tokenizer --data_dir "$data_dir" --model unigram --vocab_size 8000 \
    --model_max_length 128 --output "$output_dir/tokenizer"

# Each seed's member: the recipe of recipes/multi30k/train.sh (the paper's model at d_model 256, 3+3 layers, dropout
# 0.2, 20 epochs of batch 64, the learning rate decaying linearly to zero, the mean of the last 8 epochs).
seed_recipe=(--dropout 0.2 --attention_dropout 0.1 --num_train_epochs 20 --per_device_train_batch_size 64 \
    --per_device_eval_batch_size 128 --learning_rate 1e-3 --warmup_steps 800 --lr_scheduler_type linear \
    --eval_strategy steps --eval_steps 1816 --save_total_limit 8 --average_checkpoints 8 --logging_steps 100)
# SMALL_MEMBER=1: one more member of another shape, the anchor's small model (d_model 128, 4+4 layers, feed-forward
# 256, dropout 0.3 without attention dropout) on its GPU schedule (recipes/multi30k/train_reranked.sh): 512 sentences
# a step, peak lr 5e-3 after 2,000 warm-up steps, decaying as 1/sqrt(step), 90 epochs, the mean of the last ten;
# float32. About 8 minutes on one H100 GPU; at one CPU thread about 4 hours with AVX-512, 6 with AVX2.
small_recipe=(--d_model 128 --num_layers 4 --num_heads 4 --intermediate_size 256 --dropout 0.3 \
    --attention_dropout 0.0 --num_train_epochs 90 --per_device_train_batch_size 512 --per_device_eval_batch_size 256 \
    --learning_rate 5e-3 --warmup_steps 2000 --eval_strategy steps --eval_steps 1900 --save_total_limit 10 \
    --save_only_model true --average_checkpoints 10 --logging_steps 570 --dataloader_num_workers 4)

# One member ($1: its name): the shared tokenizer, the array recipe, the array member_precision, the variable seed.
train_member() {
    python -m recipes.multi30k.train \
        --output_dir "$output_dir/member-$1" --data_dir "$data_dir" \
        --source_lang "$source_lang" --target_lang "$target_lang" --tokenizer "$output_dir/tokenizer" \
        "${recipe[@]}" --train_sampling_strategy group_by_length --save_strategy epoch \
        --num_beams 5 --length_penalty 1.0 1.4 1.8 --report_to none --seed "$seed" --disable_tqdm true \
        "${member_precision[@]}" > "$output_dir/member-$1.log" 2>&1
}

seeds=(42 43)
if [ -n "${ENSEMBLE_SEEDS:-}" ]; then
    read -r -a seeds <<< "$ENSEMBLE_SEEDS"
fi
members=("${seeds[@]}")
if [ "${SMALL_MEMBER:-0}" = 1 ]; then
    members=(small "${seeds[@]}")
fi
# One thread each, as many at once as there are cores.
cores=$(nproc)
member_dirs=()
pids=()
for member in "${members[@]}"; do
    if [ "${#pids[@]}" -ge "$cores" ]; then
        for pid in "${pids[@]}"; do
            wait "$pid"  # a member that fails stops the job here (set -e), its log says why
        done
        pids=()
    fi
    if [ "$member" = small ]; then
        recipe=("${small_recipe[@]}")
        member_precision=()
        seed=42
    else
        recipe=("${seed_recipe[@]}")
        member_precision=("${precision_args[@]}")
        seed=$member
    fi
    train_member "$member" &
    pids+=($!)
    member_dirs+=("$output_dir/member-$member")
    echo "member $member training (pid $!), its log: $output_dir/member-$member.log"
done
for pid in "${pids[@]}"; do
    wait "$pid"
done

# The members as one model, scored as each member scored itself (bfloat16 decoding where it trained in it).
python -m recipes.multi30k.evaluate \
    --model_dirs "${member_dirs[@]}" --output_dir "$output_dir" \
    --data_dir "$data_dir" --source_lang "$source_lang" --target_lang "$target_lang" \
    --num_beams 5 --length_penalty 1.0 1.4 1.8 \
    "${precision_args[@]}"
