# Sourced by the job scripts: sets the array precision_args to bfloat16 autocast where the hardware computes in it
# (a GPU, or a CPU with AVX512-BF16 or AMX: hf_transformer.training.cpu_computes_bfloat16, which the training
# scripts' warning reads too), else leaves it empty (float32). The weights and the optimizer stay in float32 either
# way. On such a CPU a d_model-256 translation model trains about 1.9x as many steps per second and the NSMC
# encoder's masked-token pretraining about 1.4x (docs/results.md); on a CPU without it bfloat16 is many times slower.
# One interpreter start for both checks; a failing one stops a script run under `set -e` (all the job scripts)
# rather than falling back to float32.
hardware=$(python -c "import torch; from hf_transformer.training import cpu_computes_bfloat16 as cpu_bf16
print('gpu' if torch.cuda.is_available() else 'cpu_bf16' if cpu_bf16() else 'float32')")
precision_args=()
if [ "$hardware" = gpu ]; then
    precision_args=(--bf16 true)
elif [ "$hardware" = cpu_bf16 ]; then
    precision_args=(--bf16 true --use_cpu true)
fi
