# Sourced by the job scripts with the shape of the model they train: sets the array precision_args to bfloat16
# autocast where it trains that model faster here, else leaves it empty (float32). The weights and the optimizer
# stay in float32 either way.
#
#   . recipes/common/precision_args.sh --task masked-lm|seq2seq --vocab_size V --max_length L --batch_size B \
#       --d_model D --num_layers N --num_heads H --intermediate_size F
#
# A GPU trains in bfloat16. A CPU with AVX512-BF16 or AMX times a few training steps of a model of that shape in
# both and takes bfloat16 only when it is faster beyond the timing's noise (recipes.common.precision: on some such
# CPUs bfloat16 is slower than float32 for some shapes, benchmarks/results/notes.md); a CPU without them computes
# bfloat16 in reference kernels, many times slower, and keeps float32 without timing. The measurement runs at the
# thread count the job's training will have (OMP_NUM_THREADS as set when this is sourced) and is printed to stderr.
# One failing check stops a script run under `set -e` (all the job scripts) rather than falling back to float32.
# The measurement is remembered per CPU, torch version, thread count and shape (~/.cache/hf_transformer/precision.json),
# so a job run again on this machine trains in the precision it trained in before.
# HF_TRANSFORMER_PRECISION=float32 or bfloat16 in the environment takes that precision without timing (auto: measured).
hardware=$(python -m recipes.common.precision "$@")
precision_args=()
if [ "$hardware" = gpu ]; then
    precision_args=(--bf16 true)
elif [ "$hardware" = cpu_bf16 ]; then
    precision_args=(--bf16 true --use_cpu true)
fi
