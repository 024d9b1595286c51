"""A job script run as a new user runs it, several times: each run in a fresh clone of the repository's last commit,
one after another, with the time, the score and a digest of the saved weights of each run written to one report.

    python -m recipes.common.fresh_clones --runs 3 --output runs/fresh-clones.md -- scripts/main_job.sh ../shared/data
    HF_TRANSFORMER_PRECISION=float32 python -m recipes.common.fresh_clones --runs 2 ... -- scripts/main_job.sh ...

Each clone installs what the job installs (its own ``.venv``), so a run's time is the install and the job; where the
job prints ``finished in N s`` (``scripts/main_job.sh`` does, after installing), that figure is reported beside it,
and so are the seconds of each training loop the job ran (each ``Trainer.train`` logs its ``train_runtime``).
After a run, ``--results`` (a JSON file the job writes, relative to the clone) gives the score (``--metric``), and
the digest of ``--weights`` shows whether the runs wrote the same weights byte for byte. The job's arguments that name
an existing file or folder are passed as absolute paths, since the job runs inside the clone. Each clone is deleted
after its run; ``--keep`` names a folder to copy the folder of ``--weights`` into first (``checkpoint-*`` left out).
The job's output goes to ``LOG_DIR/run-N.log``; the report (Markdown, and JSON beside it) names the CPU, the commit
and the settings in the environment that change what the job computes (``COMPUTE_SETTINGS``: the precision, the
kernels' instruction sets, the threads).
The clones share the user's remembered precision measurement (``recipes.common.precision``): the first run on a
machine that has none measures it, as a new user's first job does, and the others, as that user's later jobs, take it.
A run that fails, or ends without writing ``--results`` and ``--weights``, stops the series: the report keeps the
runs before it, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_transformer.commands import run_command
from hf_transformer.cpu import cpu_description
from hf_transformer.openmp import USER_SETTINGS
from recipes.common.corpus_files import file_sha256
from recipes.common.precision import KERNEL_VARIABLES, MEASUREMENTS_FILE_VARIABLE, PRECISION_VARIABLE

REPO = Path(__file__).resolve().parents[2]
FINISHED = re.compile(r"finished in (\d+(?:\.\d+)?) s")
PRECISION_LINE = re.compile(r"^precision: (.*)$", re.M)
# Settings in the environment that change what a job computes or how fast: the precision, the instruction sets
# torch's, oneDNN's and MKL's kernels may use, the threads and how they wait. The report names those that are set.
COMPUTE_SETTINGS = (
    PRECISION_VARIABLE,
    MEASUREMENTS_FILE_VARIABLE,
    *KERNEL_VARIABLES,
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "RAYON_NUM_THREADS",
    *USER_SETTINGS,  # how the OpenMP threads wait (hf_transformer.openmp)
)
TRAIN_RUNTIME = re.compile(r"'train_runtime': '?(\d+(?:\.\d+)?)'?")  # Trainer.train's last log line: a number or text


def absolute_arguments(arguments: list[str], repo: Path) -> list[str]:
    """The job's arguments, those that name an existing file or folder outside ``repo`` made absolute (the data
    beside it); a path inside ``repo`` (an output folder such as runs/nsmc, present from an earlier run) stays
    relative, so that the clone writes its own and not the checkout's."""
    repo = repo.resolve()

    def outside(path: Path) -> bool:
        return path.exists() and not path.resolve().is_relative_to(repo)

    return [str(Path(argument).resolve()) if outside(Path(argument)) else argument for argument in arguments]


def head_commit(repo: Path) -> tuple[str, bool]:
    """The last commit of ``repo`` and whether its working tree holds changes a clone would not have."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    return commit.stdout.strip(), bool(status.stdout.strip())


def run_once(args, index: int, workdir: Path, job_arguments: list[str]) -> dict:
    """One clone, one run of the job in it; what it took and gave."""
    clone = workdir / f"clone-{index}"
    subprocess.run(["git", "clone", "--quiet", str(args.repo), str(clone)], check=True)
    log = args.log_dir / f"run-{index}.log"
    print(f"run {index} of {args.runs}: {args.job} in {clone}, its output in {log}", flush=True)
    started = time.time()
    with log.open("w", encoding="utf-8") as stream:
        done = subprocess.run(["bash", args.job, *job_arguments], cwd=clone, stdout=stream, stderr=subprocess.STDOUT)
    seconds = time.time() - started
    output = log.read_text(encoding="utf-8", errors="replace")
    run = {"run": index, "returncode": done.returncode, "seconds_with_install": round(seconds, 1), "log": str(log)}
    reported = FINISHED.findall(output)
    run["job_seconds"] = float(reported[-1]) if reported else None
    precision = PRECISION_LINE.findall(output)
    run["precision"] = precision[-1] if precision else None
    run["training_seconds"] = [float(seconds) for seconds in TRAIN_RUNTIME.findall(output)]
    missing = [name for name in (args.results, args.weights) if not (clone / name).is_file()]
    if done.returncode:
        run["failure"] = f"exit status {done.returncode}"
    elif missing:  # the job ended well but wrote elsewhere
        run["failure"] = "no " + " and no ".join(missing)
    elif args.metric not in (results := json.loads((clone / args.results).read_text())):
        run["failure"] = f"no {args.metric} in {args.results}"
    else:
        run["failure"] = None
        run["metric"] = results[args.metric]
        run["weights_sha256"] = file_sha256(clone / args.weights)
        if args.keep:
            folder = (clone / args.weights).parent
            kept = args.keep / f"run-{index}"
            shutil.copytree(folder, kept, ignore=shutil.ignore_patterns("checkpoint-*"), dirs_exist_ok=True)
            run["kept"] = str(kept)
    shutil.rmtree(clone)
    return run


def report_text(report: dict) -> str:
    runs = [run for run in report["runs"] if run["failure"] is None]
    digests = {run["weights_sha256"] for run in runs}
    lines = [
        f"`{report['job']}` from fresh clones of {report['commit'][:7]}, one run at a time, on {report['cpu']}"
        + (f" ({' '.join(report['settings'])})" if report["settings"] else "")
        + ".",
        "",
        f"| run | {report['metric']} | seconds with installing | seconds the job reports | its training loops (s) "
        "| weights (sha256) |",
        "|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        if run["failure"]:
            lines.append(f"| {run['run']} | failed ({run['failure']}; {run['log']}) | | | | |")
            continue
        job = "" if run["job_seconds"] is None else f"{run['job_seconds']:g}"
        loops = ", ".join(f"{seconds:g}" for seconds in run["training_seconds"])
        lines.append(
            f"| {run['run']} | {run['metric']:.4%} | {run['seconds_with_install']:g} | {job} | {loops} | "
            f"{run['weights_sha256'][:12]} |"
        )
    if runs:
        scores = [run["metric"] for run in runs]
        lines += [
            "",
            f"{report['metric']}: {min(scores):.4%} to {max(scores):.4%} over {len(runs)} run(s), median "
            f"{statistics.median(scores):.4%}; "
            + (
                "the same weights byte for byte in every run."
                if len(digests) == 1
                else f"{len(digests)} different weights."
            ),
        ]
        precisions = {run["precision"] for run in runs if run["precision"]}
        if precisions:
            lines.append("The precision check: " + "; ".join(sorted(precisions)) + ".")
    return "\n".join(lines) + "\n"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m recipes.common.fresh_clones", description=__doc__.split("\n\n")[0])
    parser.add_argument("job", help="the job script, relative to the repository (scripts/main_job.sh)")
    parser.add_argument("job_arguments", nargs="*", help="its arguments (after --)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, required=True, help="the report (.md; .json beside it)")
    parser.add_argument("--results", default="runs/nsmc/results.json", help="the JSON file the job writes")
    parser.add_argument("--metric", default="test_accuracy", help="the key of the score in --results")
    parser.add_argument("--weights", default="runs/nsmc/model.safetensors", help="the weights file to compare")
    parser.add_argument("--log_dir", type=Path, help="where the jobs' output goes (default: beside --output)")
    parser.add_argument("--keep", type=Path, help="a folder to copy each run's --weights folder into, as run-N")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (default: this one)")
    parser.add_argument("--workdir", type=Path, help="where the clones are made (default: a temporary folder)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    if not (args.repo / args.job).is_file():
        parser.error(f"{args.job} is not a file of {args.repo}")
    if args.output.suffix != ".md":
        parser.error(f"--output {args.output}: the report is a .md file (its logs go in the folder of its name)")
    # A series writes anew: an earlier series' report, logs or kept folders are not written over or mixed in.
    log_dir = args.log_dir or args.output.with_suffix("")
    earlier = [args.output, args.output.with_suffix(".json")]
    earlier += [log_dir / f"run-{index}.log" for index in range(1, args.runs + 1)]
    earlier += [args.keep / f"run-{index}" for index in range(1, args.runs + 1)] if args.keep else []
    present = [str(path) for path in earlier if path.exists()]
    if present:
        parser.error(f"an earlier series' files are there ({', '.join(present[:3])}): give another --output or --keep")
    for option, folder in (("--keep", args.keep), ("--log_dir", log_dir)):
        if folder is not None and folder.exists() and not folder.is_dir():
            parser.error(f"{option} {folder} is a file; give a folder")
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir}: no such folder")
    try:
        commit, changed = head_commit(args.repo)
    except subprocess.CalledProcessError as error:
        reason = (error.stderr or "").strip().splitlines()
        parser.error(f"--repo {args.repo}: not a git repository ({reason[0] if reason else error})")
    if changed:
        print(f"the working tree of {args.repo} has changes the clones will not have: they run {commit[:7]}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.log_dir = args.log_dir or args.output.with_suffix("")
    args.log_dir.mkdir(parents=True, exist_ok=True)
    job_arguments = absolute_arguments(args.job_arguments, args.repo)
    report = {
        "job": " ".join([args.job, *args.job_arguments]),
        "commit": commit,
        "cpu": cpu_description(),
        "settings": [f"{name}={os.environ[name]}" for name in COMPUTE_SETTINGS if os.environ.get(name)],
        "metric": args.metric,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        for index in range(1, args.runs + 1):
            run = run_once(args, index, Path(workdir), job_arguments)
            report["runs"].append(run)
            args.output.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
            args.output.write_text(report_text(report))
            if run["failure"]:
                print(f"run {index} failed ({run['failure']}); its output: {run['log']}")
                return 1
            print(f"run {index}: {args.metric} {run['metric']:.4%} in {run['seconds_with_install']:g} s", flush=True)
    print(f"report: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
