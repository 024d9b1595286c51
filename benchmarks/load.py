"""Training speed beside other work: the main job's pretraining steps on a quiet machine and beside busy processes.

Runs ``scripts/pretrain_denoising.py`` with the main job's model and batch (``scripts/main_job.sh``: d_model 128,
2 layers, batch 128, lengths grouped, the precision the job's check chooses) for ``--steps`` steps, as a new
process each time, and reports its steps per second after the first ``--skip`` steps, under each load:

- ``quiet``: nothing else running;
- ``busy-1`` / ``busy-2``: one or two ``python -c "while True: pass"`` loops, started from this process's session
  (as two loops started in the user's shell are);
- ``installs``: a new user's installation, repeated: a fresh venv, ``pip install torch==2.13.0``, ``pip install -e``
  this repository (pip's cache makes it local work: unpacking, compiling, writing).

and under each OpenMP waiting setting (``--settings``):

- ``job``: what the job scripts do (``recipes/common/wait_policy.sh``: the check of ``hf_transformer.openmp``, run
  with the load already running, exports ``OMP_WAIT_POLICY=PASSIVE`` where other processes keep the cores busy; a
  quiet machine keeps the runtime's default, and the training script, finding it quiet too, runs on);
- ``libgomp-default``: ``GOMP_SPINCOUNT=300000``, the OpenMP runtime's own default, set as a user would (nothing
  then chooses for the run);
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (no spin at all).

Each round runs every load in turn (the load started before its runs and stopped after them) and, within a load,
every setting in turn, so that a drift of the machine over the hour touches quiet and loaded runs alike. A slow-down
is the quiet median over the loaded median, per setting; beside it, the range of the per-round slow-downs (each
round's quiet run over its loaded run), which a drift between the quiet and the loaded runs cannot move.
Time it on a machine with nothing else running: the loads are the only other work.

    python benchmarks/load.py --data_dir ../shared/data                  # 4 loads x 3 settings x 3 rounds: ~45 min
    python benchmarks/load.py --data_dir ../shared/data --loads quiet busy-2 --settings job --rounds 1

Writes ``benchmarks/results/load.md``, ``.json`` and ``.png`` (``--output``) and prints each run as it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
LOG_EVERY = 10

SETTINGS = {
    "job": None,  # chosen per load and round, as the job scripts choose
    "libgomp-default": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
LOADS = ("quiet", "busy-1", "busy-2", "installs")

MODEL_ARGS = ["--max_length", "64", "--d_model", "128", "--num_layers", "2", "--num_heads", "4"]
MODEL_ARGS += ["--intermediate_size", "512"]


def pretraining_command(reviews: Path, tokenizer: Path, output_dir: Path, steps: int, precision: list[str]):
    """The main job's pretraining command (scripts/main_job.sh), cut to `steps` steps, logging every 10."""
    return [
        sys.executable, "scripts/pretrain_denoising.py", "--output_dir", str(output_dir),
        "--train_file", str(reviews / "train.jsonl"), "--validation_file", str(reviews / "validation.jsonl"),
        "--tokenizer", str(tokenizer), *MODEL_ARGS, "--dropout", "0", "--attention_dropout", "0",
        "--mlm_probability", "0.15", "--max_steps", str(steps), "--per_device_train_batch_size", "128",
        "--learning_rate", "2e-3", "--warmup_steps", "300", "--weight_decay", "0.01",
        "--train_sampling_strategy", "group_by_length", "--eval_strategy", "no", "--save_strategy", "no",
        "--max_eval_samples", "100", "--logging_steps", str(LOG_EVERY), "--report_to", "none", "--seed", "42",
        *precision,
    ]  # fmt: skip


def job_setting() -> dict[str, str]:
    """The waiting setting the job scripts give their steps here and now (recipes/common/wait_policy.sh)."""
    policy = subprocess.run([sys.executable, "-m", "hf_transformer.openmp"], cwd=REPOSITORY, env=clean_environment({}),
                            check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {"OMP_WAIT_POLICY": policy} if policy else {}


def clean_environment(setting: dict[str, str]) -> dict[str, str]:
    """This process's environment without any OpenMP waiting setting of its own, plus `setting`."""
    env = {name: value for name, value in os.environ.items() if name not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(setting, PYTHONUNBUFFERED="1")
    return env


def steps_per_second(command: list[str], env: dict[str, str], skip: int) -> float:
    """Run `command`, stamp the arrival of each logged loss (one per LOG_EVERY steps) and return the steps per second
    between step `skip` and the last one logged."""
    stamps: list[float] = []
    process = subprocess.Popen(
        command, cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    line: list[str] = []
    tail: list[str] = []
    while character := process.stdout.read(1):
        if character not in "\r\n":
            line.append(character)
            continue
        text = "".join(line)
        line.clear()
        if "'loss'" in text:
            stamps.append(time.perf_counter())
        elif text.strip():
            tail = (tail + [text])[-20:]
    if process.wait() != 0:
        raise RuntimeError(f"the pretraining run failed (exit {process.returncode}):\n" + "\n".join(tail))
    first = skip // LOG_EVERY - 1
    if len(stamps) <= first + 1:
        raise RuntimeError(f"only {len(stamps)} losses logged; give more --steps than --skip")
    return (len(stamps) - 1 - first) * LOG_EVERY / (stamps[-1] - stamps[first])


@contextmanager
def load(name: str, scratch: Path):
    """Run the named load in the background for the duration of the block."""
    if name == "quiet":
        yield
        return
    if name.startswith("busy-"):
        commands = [[sys.executable, "-c", "while True: pass"]] * int(name.split("-")[1])
    elif name == "installs":
        venv = scratch / "install-venv"
        commands = [["bash", "-c", (
            f"while true; do rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/pip install -q torch==2.13.0 && "
            f"{venv}/bin/pip install -q -e {REPOSITORY}; done"
        )]]  # fmt: skip
    else:
        raise ValueError(f"unknown load {name!r}; choose from {', '.join(LOADS)}")
    # A process group of their own (to stop them with their children), in this session like a user's shell jobs.
    processes = [
        subprocess.Popen(command, process_group=0, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for command in commands
    ]
    try:
        time.sleep(2)  # the load running before the first step
        yield
    finally:
        for process in processes:
            os.killpg(process.pid, 9)
            process.wait()


def prepare(data_dir: Path, scratch: Path, precision: str) -> tuple[Path, Path, list[str]]:
    """The job's JSON-lines reviews, its 16k BPE tokenizer trained on them (by a one-step pretraining run) and the
    precision arguments."""
    reviews, tokenizer = scratch / "reviews", scratch / "tokenizer"
    run = dict(cwd=REPOSITORY, check=True, stdout=subprocess.DEVNULL)
    print("preparing the reviews and the tokenizer ...", flush=True)
    subprocess.run([sys.executable, "-m", "recipes.nsmc.prepare", "--data_dir", str(data_dir), "--output_dir",
                    str(reviews), "--seed", "42"], **run)  # fmt: skip
    subprocess.run([sys.executable, "scripts/pretrain_denoising.py", "--output_dir", str(tokenizer), "--train_file",
                    str(reviews / "train.jsonl"), "--validation_file", str(reviews / "validation.jsonl"),
                    "--vocab_size", "16000", "--tokenizer_model", "bpe", *MODEL_ARGS, "--max_steps", "1",
                    "--eval_strategy", "no", "--save_strategy", "no", "--max_eval_samples", "100", "--report_to",
                    "none"], **run)  # fmt: skip
    if precision == "auto":
        shape = ["--task", "masked-lm", "--vocab_size", "16000", "--batch_size", "128", *MODEL_ARGS]
        precision = subprocess.run([sys.executable, "-m", "recipes.common.precision", *shape], cwd=REPOSITORY,
                                   check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
        precision = "bf16" if precision in ("cpu_bf16", "gpu") else "fp32"
    return reviews, tokenizer, (["--bf16", "true", "--use_cpu", "true"] if precision == "bf16" else [])


def summarize(runs: dict[str, dict[str, list[float]]]) -> dict:
    """Per load and setting: median and quartiles of steps per second, and the slow-down against quiet."""
    table = {}
    for load_name, by_setting in runs.items():
        for setting, speeds in by_setting.items():
            quartiles = statistics.quantiles(speeds, n=4) if len(speeds) > 1 else [speeds[0]] * 3
            row = {"runs": speeds, "median": statistics.median(speeds), "q1": quartiles[0], "q3": quartiles[2]}
            quiet = runs.get("quiet", {}).get(setting)
            if quiet:
                row["slowdown"] = statistics.median(quiet) / row["median"]
                by_round = [quiet_speed / speed for quiet_speed, speed in zip(quiet, speeds, strict=True)]
                row["slowdown_by_round"] = by_round
            table.setdefault(load_name, {})[setting] = row
    return table


def write_results(table: dict, meta: dict, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": table}, indent=2) + "\n")
    lines = [
        "# Training speed beside other work",
        "",
        f"`python benchmarks/load.py {' '.join(meta['argv'])}` on {meta['cpu']} ({meta['cores']} cores), "
        f"{meta['precision']}, {meta['steps']} steps timed after the first {meta['skip']}, {meta['rounds']} rounds.",
        "Steps per second: median (quartiles); slow-down: the same setting's quiet median over this one (in brackets:",
        "the range of each round's quiet run over its loaded run).",
        *(
            [f"`job`: the waiting the job's check chose, per load and round: {meta['job_choices']}."]
            if meta.get("job_choices")
            else []
        ),
        "",
        "| load | " + " | ".join(meta["settings"]) + " |",
        "|---|" + "---|" * len(meta["settings"]),
    ]
    for load_name, by_setting in table.items():
        cells = []
        for setting in meta["settings"]:
            row = by_setting[setting]
            cell = f"{row['median']:.2f} ({row['q1']:.2f}-{row['q3']:.2f})"
            if load_name != "quiet" and "slowdown" in row:
                by_round = row["slowdown_by_round"]
                cell += f", {row['slowdown']:.2f}x (rounds {min(by_round):.2f}-{max(by_round):.2f}x)"
            cells.append(cell)
        lines.append(f"| {load_name} | " + " | ".join(cells) + " |")
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(table, meta, output.with_suffix(".png"))


def plot(table: dict, meta: dict, path: Path) -> None:
    try:
        from hf_transformer.figures import pyplot, save_figure
    except ImportError:  # matplotlib is optional
        return
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 3.5))
    loads, settings = list(table), meta["settings"]
    width = 0.8 / len(settings)
    for index, setting in enumerate(settings):
        xs = [position + index * width for position in range(len(loads))]
        medians = [table[name][setting]["median"] for name in loads]
        errors = [
            [table[n][setting]["median"] - table[n][setting]["q1"] for n in loads],
            [table[n][setting]["q3"] - table[n][setting]["median"] for n in loads],
        ]
        axes.bar(xs, medians, width, yerr=errors, label=setting, capsize=2)
    if "quiet" in table and "job" in settings:
        half = table["quiet"]["job"]["median"] / 2
        axes.axhline(half, color="grey", linestyle="--", linewidth=1, label="half the quiet speed")
    axes.set_xticks([position + 0.4 - width / 2 for position in range(len(loads))], loads)
    axes.set_ylabel("training steps per second")
    axes.set_title(f"The main job's pretraining steps beside other work ({meta['cores']} cores)")
    axes.legend(fontsize=8)
    save_figure(figure, path)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, required=True, help="holds nsmc/ratings_{train,test}.txt")
    parser.add_argument("--loads", nargs="+", default=list(LOADS), choices=LOADS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=170)
    parser.add_argument("--skip", type=int, default=30, help="steps left out of the timing (a multiple of 10)")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: the job's check chooses, on the quiet machine")  # fmt: skip
    parser.add_argument("--output", type=Path, default=REPOSITORY / "benchmarks/results/load.md")
    args = parser.parse_args(argv)
    if args.skip % LOG_EVERY or args.skip < LOG_EVERY or args.steps < args.skip + 2 * LOG_EVERY:
        parser.error(f"--skip must be a positive multiple of {LOG_EVERY} and --steps at least --skip + 20")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_arguments(argv)
    with tempfile.TemporaryDirectory(prefix="load-") as scratch:
        scratch = Path(scratch)
        reviews, tokenizer, precision = prepare(args.data_dir, scratch, args.precision)
        runs: dict[str, dict[str, list[float]]] = {}
        job_choices: dict[str, list[str]] = {}
        for round_index in range(args.rounds):
            for load_name in args.loads:
                with load(load_name, scratch):
                    for setting in args.settings:
                        environment = SETTINGS[setting]
                        if environment is None:
                            environment = job_setting()
                            chosen = environment.get("OMP_WAIT_POLICY", "default")
                            job_choices.setdefault(load_name, []).append(chosen)
                        command = pretraining_command(reviews, tokenizer, scratch / "run", args.steps, precision)
                        speed = steps_per_second(command, clean_environment(environment), args.skip)
                        runs.setdefault(load_name, {}).setdefault(setting, []).append(speed)
                        waiting = " ".join(f"{name}={value}" for name, value in environment.items())
                        print(f"{load_name:9s} round {round_index + 1}/{args.rounds} {setting:16s} {speed:6.2f} "
                              f"steps/s {waiting}", flush=True)  # fmt: skip
    table = summarize(runs)
    from hf_transformer.cpu import cpu_description  # the package (and torch) only where the record is written

    meta = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "cpu": cpu_description(),
        "cores": len(os.sched_getaffinity(0)),
        "precision": "bfloat16 autocast" if precision else "float32",
        "steps": args.steps - args.skip,
        "skip": args.skip,
        "rounds": args.rounds,
        "settings": args.settings,
        "job_choices": job_choices,
    }
    write_results(table, meta, args.output)
    print(f"written {args.output}", flush=True)
    return table


if __name__ == "__main__":
    main()
