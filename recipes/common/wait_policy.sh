# Sourced by the job scripts before their first Python step: where other processes keep this machine's cores busy,
# exports OMP_WAIT_POLICY=PASSIVE for every step of the job, so that torch's OpenMP threads sleep instead of spinning
# while they wait (spinning beside busy processes slows training several times over: docs/performance.md); a quiet
# machine keeps libgomp's default, and a waiting setting of the user's (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is kept.
# Measured here, before the job starts any process of its own (hf_transformer.openmp); the reason goes to stderr.
#
#   . recipes/common/wait_policy.sh
#
# One failing check stops a script run under `set -e` (all the job scripts).
wait_policy=$(python -m hf_transformer.openmp)
if [ -n "$wait_policy" ]; then
    export OMP_WAIT_POLICY=$wait_policy
fi
