# Sourced by the job scripts: sets the array precision_args to bfloat16 autocast where the hardware computes in it
# (a GPU, or a CPU with AVX512-BF16 or AMX), else leaves it empty (float32). The weights and the optimizer stay in
# float32 either way. On such a CPU a d_model-256 translation model trains about 1.9x as many steps per second and
# the NSMC encoder's masked-token pretraining about 1.4x (docs/results.md).
precision_args=()
if python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    precision_args=(--bf16 true)
elif grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo 2>/dev/null; then
    precision_args=(--bf16 true --use_cpu true)
fi
