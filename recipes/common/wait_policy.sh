# Sourced by the job scripts before their first Python step: where other processes keep this machine's cores busy,
# exports OMP_WAIT_POLICY=PASSIVE for every step of the job, so that torch's OpenMP threads sleep instead of spinning
# while they wait (spinning beside busy processes slows training several times over: docs/performance.md); a quiet
# machine keeps libgomp's default, and a waiting setting of the user's (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is kept.
# Measured here, before the job starts any process of its own (hf_transformer.openmp); the reason goes to stderr.
#
#   . recipes/common/wait_policy.sh
#
# One failing check stops a script run under `set -e` (all the job scripts).
# The module's file is run alone: `python -m hf_transformer.openmp` would import the package first, and with it
# transformers and torch, seconds before the job's first step for a check that needs neither.
wait_policy=$(python -c 'import importlib.util, pathlib, runpy, sys; spec = importlib.util.find_spec("hf_transformer"); spec or sys.exit("No module named hf_transformer: install the package first"); sys.argv = [str(pathlib.Path(spec.origin).with_name("openmp.py"))]; runpy.run_path(sys.argv[0], run_name="__main__")')
if [ -n "$wait_policy" ]; then
    export OMP_WAIT_POLICY=$wait_policy
fi
