"""Collect a recipe's finished training runs into its records: results.json, notes.md and learning-curve PNGs.

    python -m recipes.common.collect_results --manifest recipes/multi30k/records/runs.json \
        --output_dir recipes/multi30k/records

The manifest (JSON, `runs.json` in the records folder) names the run folders and what to say about each; every
figure comes from the folders themselves: their `results.json` (written by the training, scoring and reranking
programs: metrics, parameters, wall seconds and the exact command) and their Trainer log history (`log_history.json`
or a checkpoint's `trainer_state.json`), which is drawn with `recipes.common.plotting`.

    {
      "title": "NSMC sentiment: training records",
      "machine": "2-core CPU, one thread per training process",
      "figures": "curves",
      "intro": ["lab notes, one paragraph each"],
      "targets": {"nsmc_sentiment": {"metric": "accuracy", "split": "test", "value": 0.865}},
      "runs": [{"dir": "runs/nsmc-baseline", "name": "nsmc-baseline", "note": "..."}]
    }

A run's ``task`` is its results.json's, or the manifest entry's ``"task"`` where given (the general scripts record a
general task, such as "text_classification", that the recipe's targets and metrics do not name).

`results.json` is a list of records with the keys `task`, `metric`, `value`, `split`, `command`, `params` and
`wall_seconds` (plus `run`, `curve`, `note` and the parts of the wall time: `run_wall_seconds`,
`pretraining_wall_seconds`, `members_wall_seconds`). A classifier started from a pretrained encoder
(`--init_from`, followed back through continued pretraining runs) counts the pretraining too: its command is
every command joined by `&&` and its wall time their sum, when the earlier folders are found. A run's command as
its folder records it becomes a command to run from the repository root: `train_translation.py ...` (a script's
file name) runs from `scripts/`, `recipes.multi30k.train ...` (a module) with `python -m`, and a run of several
processes under torchrun.

Run folders stay on the machine that trained them. A manifest entry whose folder is not there at all keeps the
records already published for its run in the output folder's `results.json` (and its learning curve, if the
curves folder still holds it), with the manifest's note; a folder that is there without a `results.json` (an
unfinished run), or a missing one with no published records, is an error.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

from hf_transformer.commands import run_command
from recipes.common.plotting import plot_curves, read_log_history, save, use_cjk_font

logger = logging.getLogger("collect_results")

NOTES = "notes.md"  # the lab notes: the manifest's prose and every run's command and figures
# A dotted module name (`recipes.multi30k.train`), as a recipe step run with `python -m` may record itself.
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")

# task -> [(metric name in the records, key in results.json, split)]
METRICS = {
    "nsmc_sentiment": [
        ("accuracy", "test_accuracy", "test"),
        ("f1", "test_f1", "test"),
        ("accuracy", "eval_accuracy", "validation"),
        # A classifier with the n-gram score: each part alone (train_classifier.py --ngram_buckets).
        ("accuracy_encoder_alone", "test_encoder_accuracy", "test"),
        ("accuracy_encoder_alone", "eval_encoder_accuracy", "validation"),
        ("accuracy_ngram_alone", "eval_ngram_accuracy", "validation"),
    ],
    "nsmc_denoising_pretraining": [
        ("masked_token_loss", "eval_loss", "validation"),
        ("masked_token_accuracy", "eval_masked_accuracy", "validation"),
    ],
    "translation": [
        ("bleu", "test_bleu", "test2016"),
        ("bleu_lc_tok", "test_bleu_lc_tok", "test2016"),
        ("bleu_greedy", "test_greedy_bleu", "test2016"),
        ("bleu_lc_tok_greedy", "test_greedy_bleu_lc_tok", "test2016"),
        ("bleu", "eval_bleu", "validation"),
        ("bleu_lc_tok", "eval_bleu_lc_tok", "validation"),
    ],
}


def infer_task(results: dict) -> str:
    if "task" in results:
        return results["task"]
    if "test_bleu" in results:
        return f"translation_{results.get('source_lang', 'src')}_to_{results.get('target_lang', 'tgt')}"
    if "test_accuracy" in results:
        return "nsmc_sentiment"
    raise ValueError("results.json names no task and holds neither test_accuracy nor test_bleu")


def metric_keys(task: str) -> list[tuple[str, str, str]]:
    return METRICS["translation"] if task.startswith("translation_") else METRICS.get(task, [])


def shell_command(command: str, world_size: int = 1) -> str:
    """A command as a run's folder records it -> a command to run from the repository root.

    `script.py --args` (a general script, as the scripts write it) runs from `scripts/`; `package.module --args`
    (a recipe step run with `python -m`) as a module; a run of several processes (its results' `world_size`) is
    launched as it was, by torchrun. Anything else (a command already written out) is kept."""
    program = command.split(" ", 1)[0]
    if program.endswith(".py"):
        target = f"scripts/{command}"
    elif MODULE.fullmatch(program):
        target = f"-m {command}"
    else:
        return command
    if world_size > 1:
        return f"torchrun --nproc_per_node {world_size} {target}"
    return f"python {target}"


def resolve(path: str, base: Path) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base / candidate


def earlier_runs(results: dict, base: Path, name: str) -> list[dict]:
    """The results of the runs this one started from (``init_from``, followed back), oldest first."""
    chain: list[dict] = []
    seen = set()
    while results.get("init_from"):
        folder = resolve(results["init_from"], base).resolve()
        if folder in seen:
            raise ValueError(f"{name}: init_from runs in a circle through {folder}")
        seen.add(folder)
        if not (folder / "results.json").is_file():
            logger.warning("%s: the earlier run %s is not there; its time is not counted", name, folder)
            break
        results = json.loads((folder / "results.json").read_text())
        chain.insert(0, results)
    return chain


# The parts of a run's wall time (and how many trained models a scoring run decodes), kept in each of its records
# so that a published run can be shown again.
WALL_PARTS = ("run_wall_seconds", "pretraining_wall_seconds", "members_wall_seconds", "members")


def published_run(entry: dict, name: str, published: list[dict], output_dir: Path) -> dict:
    """A run whose folder is not on this machine, rebuilt from its records in the published results.json."""
    records = [dict(record, note=entry.get("note", "")) for record in published]
    first = records[0]
    curve = output_dir / first["curve"] if first.get("curve") else None
    for record in records:
        record["curve"] = None  # filled in relative to the output folder by write_outputs
    return {
        "name": name,
        "task": first["task"],
        "command": first["command"],
        "params": first["params"],
        "wall_seconds": first["wall_seconds"],
        **{part: first.get(part) for part in WALL_PARTS},
        "curve": curve if curve is not None and curve.is_file() else None,
        "note": entry.get("note", ""),
        "records": records,
    }


def chained(results: dict, base: Path, name: str) -> tuple[str, float | None, list[dict], list[dict]]:
    """The run's whole command and wall time, with the runs it needed first: the pretraining it started from
    (followed back through ``init_from``) and, for an ensemble or a reranking, its members' trainings (side by side
    or one after the other). Returns (command, wall seconds, the earlier runs' results, the members)."""
    command = shell_command(results.get("command", "?"), results.get("world_size", 1))
    wall = results.get("wall_seconds")
    pretraining = earlier_runs(results, base, name)
    earlier_wall = [r.get("wall_seconds") for r in pretraining]
    if pretraining:
        command = " && ".join(
            [*(shell_command(r.get("command", "?"), r.get("world_size", 1)) for r in pretraining), command]
        )
        if wall is not None and None not in earlier_wall:
            wall = round(wall + sum(earlier_wall), 1)
    members = [member for member in results.get("ensemble", []) if "command" in member]
    if members:
        command = " && ".join([*(shell_command(m["command"], m.get("world_size", 1)) for m in members), command])
        member_walls = [m.get("wall_seconds") for m in members]
        members_wall = None if None in member_walls else round(sum(member_walls), 1)
        wall = None if wall is None or members_wall is None else round(wall + members_wall, 1)
    return command, wall, pretraining, members


def draw_curve(folder: Path, name: str, figures: Path) -> Path | None:
    """The run's learning curves as ``figures/<name>.png``; None (and a warning) when its folder keeps no log."""
    try:
        figure, _ = plot_curves(read_log_history(folder), title=name)
    except (FileNotFoundError, ValueError) as error:
        logger.warning("%s: no learning curve (%s)", name, error)
        return None
    return save(figure, figures / f"{name}.png")


def run_records(run: dict, results: dict) -> list[dict]:
    """One record per metric the run's task reports and its results hold."""
    return [
        {
            "task": run["task"],
            "metric": metric,
            "value": results[key],
            "split": split,
            "command": run["command"],
            "params": run["params"],
            "wall_seconds": run["wall_seconds"],
            "run": run["name"],
            "curve": None,  # filled in relative to the output folder by write_outputs
            "note": run["note"],
            **{part: run[part] for part in WALL_PARTS},
        }
        for metric, key, split in metric_keys(run["task"])
        if key in results
    ]


def collect_run(
    entry: dict, base: Path, figures: Path, published: dict[str, list[dict]] | None = None, output_dir: Path = Path()
) -> dict:
    """One manifest entry -> {name, task, results, command, params, wall_seconds, curve, note, records}.

    ``published``: the records of ``output_dir``'s results.json by run name, used for a folder that is not on this
    machine."""
    folder = resolve(entry["dir"], base)
    name = entry.get("name", folder.name)
    if not folder.exists() and (published or {}).get(name):
        logger.info("%s: %s is not here; keeping its published records", name, folder)
        return published_run(entry, name, published[name], output_dir)
    results_file = folder / "results.json"
    if not results_file.is_file():
        raise FileNotFoundError(f"{folder} holds no results.json: is the run finished?")
    results = json.loads(results_file.read_text())
    command, wall, pretraining, members = chained(results, base, name)
    members_wall = [m.get("wall_seconds") for m in members]
    run = {
        "name": name,
        # The general scripts record a general task ("text_classification"); the manifest names the recipe's.
        "task": entry.get("task") or infer_task(results),
        "results": results,
        "command": command,
        "params": results.get("parameters"),
        "wall_seconds": wall,
        "run_wall_seconds": results.get("wall_seconds"),
        # Unknown where any earlier run's time is (summed as 0 it would read as a breakdown that is not).
        "pretraining_wall_seconds": _summed([r.get("wall_seconds") for r in pretraining]) if pretraining else None,
        "members_wall_seconds": round(sum(members_wall), 1) if members and None not in members_wall else None,
        "members": len(members) or None,
        "curve": draw_curve(folder, name, figures),
        "note": entry.get("note", ""),
    }
    run["records"] = run_records(run, results)
    return run


def _summed(seconds: list[float | None]) -> float | None:
    return None if None in seconds else sum(seconds)


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    whole = round(seconds)  # rounded once: 119.6 s is 2 min 00 s, not 1 min 60 s
    return f"{whole // 60} min {whole % 60:02d} s"


def value_text(metric: str, value: float) -> str:
    if metric in ("accuracy", "f1", "masked_token_accuracy") or metric.startswith("accuracy_"):
        return f"{100 * value:.2f}%"  # accuracy_encoder_alone and the like: parts of the same score
    if metric.startswith("bleu"):
        return f"{value:.2f}"
    return f"{value:.4f}"


def target_text(record: dict, targets: dict) -> tuple[str, str]:
    """(target, met) for a record whose task, metric and split have a target; else ("", "")."""
    target = targets.get(record["task"])
    if not target or target["metric"] != record["metric"] or target["split"] != record["split"]:
        return "", ""
    return value_text(record["metric"], target["value"]), "yes" if record["value"] >= target["value"] else "no"


def header(manifest: dict, command: str) -> list[str]:
    """The notes' title, how they were made, the machine and the manifest's own paragraphs."""
    lines = [
        f"# {manifest.get('title', 'Training results')}",
        "",
        f"Generated by `{command}` from the run folders' `results.json` and Trainer logs; edit the manifest "
        "(`runs.json`) and run it again rather than editing this file.",
        "",
    ]
    if manifest.get("machine"):
        lines += [
            f"Machine: {manifest['machine']}. Wall time is the whole command (tokenizer training, data "
            "preparation, training, evaluation and saving); for a classifier started from a pretrained "
            "encoder it includes the pretraining run.",
            "",
        ]
    for paragraph in manifest.get("intro", []):
        lines += [paragraph, ""]
    return lines


def headline_table(runs: list[dict], targets: dict) -> list[str]:
    """One row per run: its first record against the task's target."""
    lines = [
        "| run | task | metric | split | value | target | met | parameters | wall time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for record in run["records"][:1]:  # the headline figure; every figure is in the run's section
            target, met = target_text(record, targets)
            params = f"{run['params']:,}" if run["params"] else "n/a"
            lines.append(
                f"| [{run['name']}](#{run['name']}) | {record['task']} | {record['metric']} | {record['split']} | "
                f"{value_text(record['metric'], record['value'])} | {target} | {met} | {params} | "
                f"{minutes(run['wall_seconds'])} |"
            )
    return lines + [""]


def wall_time_text(run: dict) -> str:
    """The run's wall time, with its parts when it includes trained members or pretraining."""
    if run.get("members_wall_seconds") is not None:
        # An ensemble's members, or the one saved model a scoring run re-scores.
        trained = "the members' runs" if (run.get("members") or 2) > 1 else "the model's training run"
        return (
            f"wall time {minutes(run['wall_seconds'])} ({trained} {minutes(run['members_wall_seconds'])}"
            f" + this scoring {minutes(run['run_wall_seconds'])})"
        )
    if run["pretraining_wall_seconds"] is not None:
        return (
            f"wall time {minutes(run['wall_seconds'])} (pretraining {minutes(run['pretraining_wall_seconds'])}"
            f" + this run {minutes(run['run_wall_seconds'])})"
        )
    return f"wall time {minutes(run['wall_seconds'])}"


def run_section(run: dict, output_dir: Path) -> list[str]:
    """A run's note, facts, command, every figure and its learning curve."""
    lines = [f"## {run['name']}", ""]
    if run["note"]:
        lines += [run["note"], ""]
    facts = [f"task `{run['task']}`"]
    if run["params"]:
        facts.append(f"{run['params']:,} parameters")
    facts.append(wall_time_text(run))
    lines += ["; ".join(facts) + ".", ""]
    lines += ["```bash", run["command"].replace(" && ", " &&\n"), "```", ""]
    if run["records"]:
        lines += ["| metric | split | value |", "|---|---|---|"]
        lines += [f"| {r['metric']} | {r['split']} | {value_text(r['metric'], r['value'])} |" for r in run["records"]]
        lines.append("")
    if run["curve"] is not None:
        curve = Path(run["curve"]).relative_to(output_dir).as_posix()
        lines += [f"![learning curves of {run['name']}]({curve})", ""]
    return lines


def markdown(manifest: dict, runs: list[dict], output_dir: Path, command: str) -> str:
    lines = header(manifest, command) + headline_table(runs, manifest.get("targets", {}))
    for run in runs:
        lines += run_section(run, output_dir)
    return "\n".join(lines)


def published_records(output_dir: Path) -> dict[str, list[dict]]:
    """The records the output folder's results.json already holds, by run name (none for a new folder)."""
    published: dict[str, list[dict]] = {}
    if (output_dir / "results.json").is_file():
        for record in json.loads((output_dir / "results.json").read_text()):
            published.setdefault(record["run"], []).append(record)
    return published


def flatten_records(runs: list[dict], output_dir: Path) -> list[dict]:
    """Every run's records in manifest order, each naming its run's curve relative to the output folder."""
    records = []
    for run in runs:
        for record in run["records"]:
            if run["curve"] is not None:
                record["curve"] = Path(run["curve"]).relative_to(output_dir).as_posix()
            records.append(record)
    return records


_MANIFEST_KEYS = {"title": str, "machine": str, "figures": str, "intro": list, "targets": dict, "runs": list}
_ENTRY_KEYS = {"dir": str, "name": str, "note": str, "task": str}
_TARGET_KEYS = {"metric": str, "split": str, "value": (int, float)}


def _kind(expected) -> str:
    names = {str: "text", list: "a list", dict: "an object", (int, float): "a number"}
    return names.get(expected, str(expected))


def _check_fields(where: str, found, keys: dict, required: tuple[str, ...] = ()) -> None:
    """Refuses an object with a key not in ``keys`` (a typo would be ignored), a value of another kind, or a
    ``required`` key missing, naming it."""
    if not isinstance(found, dict):
        raise ValueError(f"{where} is not a JSON object")
    for key, value in found.items():
        if key not in keys:
            raise ValueError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
        if not isinstance(value, keys[key]) or isinstance(value, bool):
            raise ValueError(f"{where}: {key!r} must be {_kind(keys[key])}, got {value!r}")
    missing = [key for key in required if key not in found]
    if missing:
        raise ValueError(f"{where}: no {', '.join(map(repr, missing))}")


def read_manifest(path: Path) -> dict:
    """The manifest, its keys and their kinds checked before any run is read (see the module's docstring)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"--manifest {path} is not JSON ({error})") from error
    _check_fields(f"--manifest {path}", manifest, _MANIFEST_KEYS, required=("runs",))
    for number, entry in enumerate(manifest["runs"], start=1):
        _check_fields(f"--manifest {path}: run {number}", entry, _ENTRY_KEYS, required=("dir",))
    for task, target in manifest.get("targets", {}).items():
        _check_fields(f"--manifest {path}: the target of {task}", target, _TARGET_KEYS, tuple(_TARGET_KEYS))
    if not all(isinstance(paragraph, str) for paragraph in manifest.get("intro", [])):
        raise ValueError(f"--manifest {path}: 'intro' must be a list of paragraphs (text)")
    names = [entry.get("name", Path(entry["dir"]).name) for entry in manifest["runs"]]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--manifest {path}: two runs named {', '.join(twice)} (their records would mix)")
    return manifest


def write_outputs(manifest_path: Path, output_dir: Path, base: Path, command: str) -> list[dict]:
    """Collect the manifest's runs and write ``results.json``, ``notes.md`` and the curves into ``output_dir``."""
    manifest = read_manifest(manifest_path)
    output_dir.mkdir(parents=True, exist_ok=True)
    figures = output_dir / manifest.get("figures", "curves")
    use_cjk_font()  # Hangul in titles, when a CJK font is installed
    published = published_records(output_dir)
    runs = [collect_run(entry, base, figures, published, output_dir) for entry in manifest["runs"]]
    records = flatten_records(runs, output_dir)
    (output_dir / "results.json").write_text(json.dumps(records, indent=2, ensure_ascii=False) + "\n")
    (output_dir / NOTES).write_text(markdown(manifest, runs, output_dir, command), encoding="utf-8")
    logger.info(
        "wrote %s and %s: %d runs, %d records", output_dir / NOTES, output_dir / "results.json", len(runs), len(records)
    )
    return records


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--manifest", required=True, help="the runs to collect (JSON), e.g. recipes/nsmc/records/runs.json"
    )
    parser.add_argument(
        "--output_dir", default=None, help="results.json, notes.md and the curves (default: the manifest's folder)"
    )
    parser.add_argument("--base_dir", default=".", help="run folders in the manifest are relative to this")
    args = parser.parse_args(argv)
    if args.output_dir is None:
        args.output_dir = str(Path(args.manifest).parent)
    return args


def rerun_command(args: argparse.Namespace) -> str:
    """The command that regenerates these records, as the notes name it."""
    options = [f"--manifest {args.manifest}", f"--output_dir {args.output_dir}"]
    if args.base_dir != ".":
        options.append(f"--base_dir {args.base_dir}")
    return " ".join(["python -m recipes.common.collect_results", *options])


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    return write_outputs(Path(args.manifest), Path(args.output_dir), Path(args.base_dir), rerun_command(args))


if __name__ == "__main__":
    run_command(main)
