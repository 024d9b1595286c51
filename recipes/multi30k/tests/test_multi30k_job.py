"""The Multi30k job scripts (recipes/multi30k/train.sh, train_ensemble.sh, train_reranked.sh): the commands they run
parse with the recipe steps' own arguments and are the runs the records (recipes/multi30k/records/results.json)
report; they refuse a direction they have no data for, and stop when a step fails.

The recipes themselves train for over an hour on the real corpus; the steps are tested end to end on generated
data in their own tests. These tests catch a job going out of step with them.
"""

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import HfArgumentParser

from recipes.multi30k import evaluate, rerank, tokenizer, train
from tests.helpers.launch import job_arrays, job_commands, precision_choices, precision_probe, script_calls

RECIPE = Path(__file__).resolve().parents[1]
REPO = RECIPE.parents[1]
JOB = RECIPE / "train.sh"
RECORDS = RECIPE / "records" / "results.json"
# The recipe's steps, as the jobs run them (python -m recipes.multi30k.<step>).
TRAIN, EVALUATE, RERANK = "recipes.multi30k.train", "recipes.multi30k.evaluate", "recipes.multi30k.rerank"
TOKENIZER = "recipes.multi30k.tokenizer"
# The programs the records' commands name for a step: its module, or the script it was before it moved here.
PROGRAMS = {
    TRAIN: ("-m recipes.multi30k.train", "scripts/train_translation.py"),
    EVALUATE: ("-m recipes.multi30k.evaluate", "scripts/evaluate_translation.py"),
    RERANK: ("-m recipes.multi30k.rerank", "scripts/rerank_translation.py"),
}
# The runs the records report for the recipe, one per direction.
REPORTED = {("en", "de"): "m30k-en-de-linear", ("de", "en"): "m30k-de-en-linear"}


def _parse(arguments: list[str]):
    return train.argument_parser().parse_args_into_dataclasses(args=arguments)


@functools.cache
def _records() -> list[dict]:
    return json.loads(RECORDS.read_text())


def _reported_call(run: str, step: str) -> list[str]:
    """The arguments of ``step`` (a module, ``TRAIN`` ...) in the command the records report for ``run``: a reported
    command may chain earlier steps before the run's own (the last call of that step), or start with ``timeout``."""
    command = next(r["command"] for r in _records() if r["run"] == run)
    calls = [(part, program) for part in re.split(r";|&&", command) for program in PROGRAMS[step] if program in part]
    call, program = calls[-1]
    words = shlex.split(call)
    return words[words.index(program.split()[-1]) + 1 :]


def _assert_same_settings(job_parts, reported_parts, ignored: set[str]) -> None:
    """Every parsed setting of a job's command equals the reported run's, but those named in ``ignored``."""
    for part, reported_part in zip(job_parts, reported_parts, strict=True):
        for name, value in vars(part).items():
            if name not in ignored:
                assert value == getattr(reported_part, name), name


def _reported_precision(reported_parts) -> list[str]:
    """The precision arguments recipes/common/precision_args.sh gives a job on a CPU, as the reported run was trained:
    a job's precision is the machine's choice, so it is given the reported run's and all else must agree."""
    return ["--bf16", "true", "--use_cpu", "true"] if reported_parts[2].bf16 else []


@pytest.mark.parametrize("precision", precision_choices())
def test_multi30k_job_parses_as_the_recipe(precision):
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": "de", "target_lang": "en"}
    commands = job_commands(JOB, variables, precision)
    assert list(commands) == [TRAIN]
    model, data, training = _parse(commands[TRAIN])

    assert (data.data_dir, data.source_lang, data.target_lang, training.output_dir) == ("DATA", "de", "en", "OUT")
    assert training.bf16 == ("--bf16" in precision)
    # The scored weights are the mean of checkpoints the run keeps, one per epoch.
    assert training.save_strategy == "epoch"
    assert training.save_total_limit >= training.average_checkpoints > 1
    assert training.average_checkpoints < training.num_train_epochs
    # Beam 5 with the length penalty chosen on validation among several.
    assert model.num_beams == 5 and len(model.length_penalty) > 1
    assert (model.d_model, model.num_layers, model.vocab_size) == (256, 3, 8000)


@pytest.mark.parametrize("job", [JOB, RECIPE / "train_ensemble.sh"], ids=lambda path: path.stem)
def test_multi30k_jobs_time_the_precision_of_the_model_they_train(job):
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": "de", "target_lang": "en", "seed": "42"}
    # The ensemble's seed members are the model timed (its small member trains in float32 whatever the probe says).
    arrays = job_arrays(job)
    member = {"recipe": arrays["seed_recipe"], "member_precision": []} if "seed_recipe" in arrays else {}
    model, _, training = _parse(job_commands(job, {**variables, "1": "42"}, [], arrays=member)[TRAIN])
    probe = precision_probe(job)
    assert probe.task == "seq2seq"
    assert (probe.d_model, probe.num_layers, probe.num_heads) == (model.d_model, model.num_layers, model.num_heads)
    assert (probe.intermediate_size, probe.vocab_size) == (model.intermediate_size, model.vocab_size)
    assert probe.batch_size == training.per_device_train_batch_size
    # Timed at the thread count the training gets: the ensemble's members train at one thread each.
    text = job.read_text()
    if "export OMP_NUM_THREADS=1" in text:
        assert text.index("export OMP_NUM_THREADS=1") < text.index(". recipes/common/precision_args.sh")


@pytest.mark.parametrize("direction", list(REPORTED))
def test_multi30k_job_is_the_reported_recipe(direction):
    # The settings that make the recipe are those of the run the records report for it (the reported command
    # saved and evaluated every N steps where the job says every epoch: the same checkpoints at batch 64).
    source, target = direction
    reported = _parse(_reported_call(REPORTED[direction], TRAIN))
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": source, "target_lang": target}
    precision = _reported_precision(reported)
    job = _parse(job_commands(JOB, variables, precision)[TRAIN])
    assert job[0] == reported[0]  # tokenizer, model sizes, dropouts, beams, length penalties
    assert (job[1].source_lang, job[1].target_lang) == (reported[1].source_lang, reported[1].target_lang)
    for name in (
        "num_train_epochs",
        "per_device_train_batch_size",
        "learning_rate",
        "warmup_steps",
        "lr_scheduler_type",
        "average_checkpoints",
        "save_total_limit",
        "train_sampling_strategy",
        "bf16",
        "seed",
    ):
        assert getattr(job[2], name) == getattr(reported[2], name), name


@pytest.mark.parametrize("languages", [["en", "fr"], ["en", "en"], ["de"]])
def test_multi30k_job_refuses_other_directions(languages, tmp_path):
    result = subprocess.run(["bash", str(JOB), *languages, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "usage: bash recipes/multi30k/train.sh" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


ENSEMBLE_JOB = RECIPE / "train_ensemble.sh"
# The runs the records report for the ensemble job's members (seeds 42 and 43) and for the ensemble itself.
REPORTED_ENSEMBLE = {
    ("en", "de"): (("m30k-en-de-linear", "m30k-en-de-linear-s43"), "m30k-en-de-linear-ens2"),
    ("de", "en"): (("m30k-de-en-linear", "m30k-de-en-linear-s43"), "m30k-de-en-linear-ens2"),
}


# What a member of the job sets for itself: its tokenizer (the job's shared one) and its folders.
PER_MEMBER = {"tokenizer", "tokenizer_type", "output_dir", "logging_dir", "data_dir", "distributed_state"}


@pytest.mark.parametrize("direction", list(REPORTED_ENSEMBLE))
def test_ensemble_job_trains_the_reported_members_and_scores_them_together(direction):
    source, target = direction
    (member_runs, ensemble_run) = REPORTED_ENSEMBLE[direction]
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": source, "target_lang": target}
    seed_recipe = job_arrays(ENSEMBLE_JOB)["seed_recipe"]
    for seed, reported_run in zip((42, 43), member_runs):
        reported = _parse(_reported_call(reported_run, TRAIN))
        precision = _reported_precision(reported)
        member_variables = {**variables, "seed": str(seed), "1": str(seed)}
        arrays = {"recipe": seed_recipe, "member_precision": precision}
        job = job_commands(ENSEMBLE_JOB, member_variables, precision, arrays=arrays)
        assert list(job) == [TOKENIZER, TRAIN, EVALUATE]
        member = _parse(job[TRAIN])
        assert member[1].source_lang == reported[1].source_lang == source
        assert member[0].tokenizer == "OUT/tokenizer" and member[2].output_dir == f"OUT/member-{seed}"
        # Every other setting is the reported run's: the model, the schedule, seed, precision.
        _assert_same_settings(member, reported, PER_MEMBER)
    # The ensemble's scoring is the reported ensemble's, over the members the job trained (their folders, filled in at
    # run time: test_ensemble_job_trains_its_members_before_it_scores_them_together).
    assert job_arrays(ENSEMBLE_JOB)["seeds"] == ["42", "43"]
    arrays = {"member_dirs": ["OUT/member-42", "OUT/member-43"], "recipe": seed_recipe, "member_precision": precision}
    job = job_commands(ENSEMBLE_JOB, {**variables, "seed": "42", "1": "42"}, precision, arrays=arrays)
    scoring = HfArgumentParser(_evaluation_parts())
    job_scoring = scoring.parse_args_into_dataclasses(args=job[EVALUATE])
    reported_scoring = scoring.parse_args_into_dataclasses(args=_reported_call(ensemble_run, EVALUATE))
    assert len(reported_scoring[0].model_dirs) == 2
    for name in ("num_beams", "length_penalty", "bf16", "per_device_eval_batch_size"):
        assert getattr(job_scoring[0], name) == getattr(reported_scoring[0], name), name


# The runs the records report for SMALL_MEMBER=1's member (trained on a GPU, beside the other direction's) and for
# the ensembles of three seeds and that member.
REPORTED_SMALL_MEMBER = {
    ("en", "de"): ("m30k-en-de-anchor-gpu-shared", "m30k-en-de-linear-ens3-gpu"),
    ("de", "en"): ("m30k-de-en-anchor-gpu-shared", "m30k-de-en-linear-ens3-gpu"),
}


@pytest.mark.parametrize("direction", list(REPORTED_SMALL_MEMBER))
def test_ensemble_job_trains_the_reported_small_member(direction):
    source, target = direction
    member_run, ensemble_run = REPORTED_SMALL_MEMBER[direction]
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": source, "target_lang": target}
    arrays = {"recipe": job_arrays(ENSEMBLE_JOB)["small_recipe"], "member_precision": []}
    job = job_commands(ENSEMBLE_JOB, {**variables, "seed": "42", "1": "small"}, ["--bf16", "true"], arrays=arrays)
    member = _parse(job[TRAIN])
    reported = _parse(_reported_call(member_run, TRAIN))
    assert member[0].tokenizer == "OUT/tokenizer" and member[2].output_dir == "OUT/member-small"
    assert (member[1].source_lang, member[1].target_lang) == direction
    # float32 whatever the seeds' precision, as the reported member trained.
    assert not member[2].bf16 and not reported[2].bf16
    # The reported members were given the 100-epoch schedule and stopped by the GPU machine's time limit after
    # epoch 90 (En->De) and 92 (De->En); the learning rate, decaying as 1/sqrt(step), does not depend on the
    # number of epochs, so the job's 90 epochs are En->De's run and De->En's but for its last two.
    assert member[2].num_train_epochs == 90 and reported[2].num_train_epochs == 100
    assert member[2].lr_scheduler_type == reported[2].lr_scheduler_type == "inverse_sqrt"
    _assert_same_settings(member, reported, PER_MEMBER | {"num_train_epochs"})
    # The reported ensemble is the three seeds' members and this one.
    scoring = HfArgumentParser(_evaluation_parts())
    reported_scoring = scoring.parse_args_into_dataclasses(args=_reported_call(ensemble_run, EVALUATE))
    assert [Path(folder).name for folder in reported_scoring[0].model_dirs] == [
        f"m30k-{source}-{target}-linear",
        f"m30k-{source}-{target}-linear-s43",
        f"m30k-{source}-{target}-linear-s44",
        member_run,
    ]


def _evaluation_parts():
    return (evaluate.EvaluationArguments, evaluate.DataArguments)


def _run_ensemble_job(
    tmp_path: Path, seeds: str | None, small_member: bool = False
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The ensemble job with a stand-in for python on PATH that logs each call's start and end (the precision check
    answers "gpu"; a training lasts a moment; the seed FAIL fails): the job's result and the log's lines."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        'case "$*" in *"-m recipes.common.precision"*) echo gpu; exit 0;; esac\n'
        f'echo "start $*" >> "{log}"\n'
        "sleep 0.5\n"
        f'echo "end $*" >> "{log}"\n'
        'case "$*" in *"--seed FAIL"*) exit 3;; esac\n'
    )
    for stand_in in bin_dir.iterdir():
        stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VIRTUAL_ENV": str(tmp_path)}
    env.pop("ENSEMBLE_SEEDS", None)
    env.pop("SMALL_MEMBER", None)
    if seeds is not None:
        env["ENSEMBLE_SEEDS"] = seeds
    if small_member:
        env["SMALL_MEMBER"] = "1"
    result = subprocess.run(
        ["bash", str(ENSEMBLE_JOB), "de", "en", "DATA", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return result, log.read_text().splitlines() if log.exists() else []


def _seed_of(call: str) -> str:
    return call.split("--seed ")[1].split()[0]


def _member_of(call: str) -> str:
    return call.split("--output_dir ")[1].split()[0].rsplit("member-", 1)[1]


@pytest.mark.slow
@pytest.mark.parametrize("seeds, small_member", [(None, False), ("42 43 44", False), ("42 43 44", True)])
def test_ensemble_job_trains_its_members_before_it_scores_them_together(seeds, small_member, tmp_path):
    result, calls = _run_ensemble_job(tmp_path, seeds, small_member)
    assert result.returncode == 0, result.stderr
    expected_seeds = (seeds or "42 43").split()
    expected_members = ["small", *expected_seeds] if small_member else expected_seeds
    # The job's choice of OpenMP waiting (recipes/common/wait_policy.sh) runs before its steps; the steps follow.
    calls = [call for call in calls if '"openmp.py"' not in call]
    trainings = [call for call in calls if f"-m {TRAIN} " in call]
    # The shared tokenizer first, before any member.
    assert calls[0].startswith(f"start -m {TOKENIZER} ") and calls[1].startswith(f"end -m {TOKENIZER} ")
    assert sorted(_member_of(call) for call in trainings if call.startswith("start")) == sorted(expected_members)
    for call in trainings:
        member = _member_of(call)
        # Each seed's member trains with its seed and the seeds' recipe; the small member with the small one.
        assert _seed_of(call) == ("42" if member == "small" else member)
        assert ("--d_model 128 " in call) == (member == "small")
        # The machine's precision (bfloat16 on the stand-in's "GPU") for the seeds; the small member in float32.
        assert ("--bf16 true" in call) == (member != "small")
    # No more trainings at once than there are cores, and the scoring only after every one has ended.
    running, most = 0, 0
    for call in trainings:
        running += 1 if call.startswith("start") else -1
        most = max(most, running)
    assert most <= len(os.sched_getaffinity(0))
    (scoring,) = [call for call in calls if call.startswith(f"start -m {EVALUATE} ")]
    assert calls.index(scoring) > max(calls.index(call) for call in trainings)
    members = " ".join(f"{tmp_path}/out/member-{member}" for member in expected_members)
    assert f"--model_dirs {members} --output_dir {tmp_path}/out " in scoring


def test_ensemble_job_refuses_a_small_member_setting_it_does_not_know(tmp_path):
    env = {**os.environ, "SMALL_MEMBER": "yes", "VIRTUAL_ENV": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(ENSEMBLE_JOB), "de", "en", "DATA", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2
    assert "SMALL_MEMBER is 1 (add the small member) or 0, not 'yes'" in result.stderr
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.slow
def test_ensemble_job_stops_before_scoring_when_a_member_fails(tmp_path):
    result, calls = _run_ensemble_job(tmp_path, "42 FAIL")
    assert result.returncode == 3
    assert not any(EVALUATE in call for call in calls)


@pytest.mark.parametrize("languages", [["en", "fr"], ["de"]])
def test_ensemble_job_refuses_other_directions(languages, tmp_path):
    result = subprocess.run(
        ["bash", str(ENSEMBLE_JOB), *languages, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "usage: bash recipes/multi30k/train_ensemble.sh" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


RERANKED_JOB = RECIPE / "train_reranked.sh"
# The runs the records report for the reranked job's schedules: each direction's training, on a GPU (the anchor's
# recipe in full) and on a CPU (16 epochs), and the CPU models reranked with each other.
REPORTED_PAIR = {
    "gpu_schedule": {("en", "de"): "m30k-en-de-anchor-gpu", ("de", "en"): "m30k-de-en-anchor-gpu"},
    "cpu_schedule": {("en", "de"): "m30k-en-de-tiny16", ("de", "en"): "m30k-de-en-tiny16"},
}
REPORTED_RERANKING = {("en", "de"): "m30k-en-de-tiny16-rerank", ("de", "en"): "m30k-de-en-tiny16-rerank"}
# What a run sets for itself: its folders (the reported GPU runs wrote to another machine's disk).
PER_RUN = {"output_dir", "logging_dir", "data_dir", "distributed_state"}


def _reranked_job(source: str, target: str, schedule: str) -> dict[str, list[str]]:
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": source, "target_lang": target, "device": "D"}
    schedule_args = job_arrays(RERANKED_JOB)[schedule]
    return job_commands(RERANKED_JOB, variables, [], arrays={"schedule": schedule_args})


@pytest.mark.parametrize("schedule", list(REPORTED_PAIR))
@pytest.mark.parametrize("direction", [("en", "de"), ("de", "en")])
def test_reranked_job_trains_the_reported_runs(schedule, direction):
    source, target = direction
    job = _parse(_reranked_job(source, target, schedule)[TRAIN])
    reported = _parse(_reported_call(REPORTED_PAIR[schedule][direction], TRAIN))
    assert job[2].output_dir == f"OUT/{source}-{target}" and job[1].data_dir == "DATA"
    assert (job[1].source_lang, job[1].target_lang) == direction
    # Every other setting is the reported run's: the anchor's model, the schedule, float32, the seed.
    _assert_same_settings(job, reported, PER_RUN)
    assert not job[2].bf16 and job[2].use_cpu == (schedule == "cpu_schedule")


@pytest.mark.parametrize("direction", list(REPORTED_RERANKING))
def test_reranked_job_reranks_each_direction_with_the_other(direction):
    source, target = direction
    parser = HfArgumentParser((rerank.RerankArguments, rerank.DataArguments))
    job = parser.parse_args_into_dataclasses(args=_reranked_job(source, target, "cpu_schedule")[RERANK])
    reported = parser.parse_args_into_dataclasses(args=_reported_call(REPORTED_RERANKING[direction], RERANK))
    assert job[0].model_dirs == [f"OUT/{source}-{target}"]
    assert job[0].channel_model_dirs == [f"OUT/{target}-{source}"]  # the other direction's model
    assert job[0].output_dir == f"OUT/{source}-{target}-reranked" and job[0].device == "D"
    assert (job[1].source_lang, job[1].target_lang) == direction
    _assert_same_settings(job, reported, {"model_dirs", "channel_model_dirs", "output_dir", "data_dir", "device"})


@pytest.mark.slow
def test_reranked_job_stops_when_a_direction_fails(tmp_path):
    # No data: both trainings fail; the job says so after both have ended and reranks nothing.
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(RERANKED_JOB), str(tmp_path / "no-data"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 1
    assert "train failed in a direction" in result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["train-de-en.log", "train-en-de.log"]


# The reported rerankings of each direction's ensemble by the other's, as the recipe README's commands run them: the
# ensemble job's three seeds with the small member, 20-best (En->De) or 10-best lists, MBR in the grid (chosen from the
# kept lists of a run that decoded them: --candidates_from, which the README's command does itself).
REPORTED_ENSEMBLE_RERANKING = {
    ("en", "de"): ("m30k-en-de-linear-ens3-gpu-rerank20-mbr",),
    ("de", "en"): ("m30k-de-en-linear-ens3-gpu-rerank10-mbr",),
}


def _readme_calls(step: str) -> list[list[str]]:
    """The arguments of every ``python -m <step>`` command in the bash blocks of the recipe's README."""
    blocks = re.findall(r"```bash\n(.*?)```", (RECIPE / "README.md").read_text(), re.S)
    return [shlex.split(rest, comments=True) for name, rest in script_calls("\n".join(blocks)) if name == step]


@pytest.mark.parametrize("direction", list(REPORTED_ENSEMBLE_RERANKING))
def test_readme_reranks_the_ensemble_jobs_folders_as_the_reported_runs(direction):
    source, target = direction
    parser = HfArgumentParser((rerank.RerankArguments, rerank.DataArguments))
    calls = [parser.parse_args_into_dataclasses(args=call) for call in _readme_calls(RERANK)]
    (readme,) = [call for call in calls if (call[1].source_lang, call[1].target_lang) == direction]
    # The ensemble job's folders (its default OUTPUT_DIR), the channel the other direction's.
    default = re.search(r"output_dir=\$\{4:-(\S+)\}", ENSEMBLE_JOB.read_text()).group(1)
    folder = default.replace("$source_lang", "{}").replace("$target_lang", "{}")
    assert readme[0].model_dirs == [folder.format(source, target)]
    assert readme[0].channel_model_dirs == [folder.format(target, source)]
    # Beam search takes the ensemble's own length penalty; all else equal.
    assert readme[0].length_penalty is None and readme[0].candidates_from is None
    for run in REPORTED_ENSEMBLE_RERANKING[direction]:
        reported = parser.parse_args_into_dataclasses(args=_reported_call(run, RERANK))
        ignored = {"model_dirs", "channel_model_dirs", "output_dir", "data_dir", "candidates_from"}
        _assert_same_settings(readme, reported, ignored)
        decoded = Path(reported[0].candidates_from).name  # the run whose lists were chosen from, decoded alike
        decoding = parser.parse_args_into_dataclasses(args=_reported_call(decoded, RERANK))
        assert decoding[0].num_candidates == readme[0].num_candidates and decoding[0].length_penalty is None
        assert (decoding[0].model_dirs, decoding[0].channel_model_dirs) == (
            reported[0].model_dirs,
            reported[0].channel_model_dirs,
        )


def test_ensemble_job_trains_the_tokenizer_the_members_were_given(tmp_path):
    # The shared tokenizer of the reported members: Unigram, 8,000 pieces, model_max_length 128, cased, from each
    # training pair's English sentence then its German one (as the tokenizer command's former `--corpus multi30k`
    # trained it before the corpus left the library).
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": "de", "target_lang": "en", "seed": "42"}
    arrays = {"recipe": job_arrays(ENSEMBLE_JOB)["seed_recipe"], "member_precision": []}
    job = job_commands(ENSEMBLE_JOB, {**variables, "1": "42"}, [], arrays=arrays)
    args = tokenizer.argument_parser().parse_args(job[TOKENIZER])
    assert (args.data_dir, args.output) == ("DATA", "OUT/tokenizer")
    assert (args.model, args.vocab_size, args.model_max_length, args.lowercase) == ("unigram", 8000, 128, False)
    assert _parse(job[TRAIN])[0].tokenizer == args.output

    from tests.helpers.launch import write_multi30k

    write_multi30k(tmp_path, {"train": 3, "val": 1, "test_2016_flickr": 1})
    english = (tmp_path / "multi30k" / "train.en").read_text(encoding="utf-8").splitlines()
    german = (tmp_path / "multi30k" / "train.de").read_text(encoding="utf-8").splitlines()
    texts = tokenizer.training_texts(str(tmp_path))
    assert texts == [english[0], german[0], english[1], german[1], english[2], german[2]]


def test_the_readmes_student_command_is_the_recipe_on_the_teachers_targets():
    # The README's distilled student: train.sh with options after its output folder, which come after the recipe's
    # own (a later option wins). Twice the pairs a step sees for half the epochs, a checkpoint every 453 steps: the
    # recipe's updates, schedule and averaged checkpoints (to a batch an epoch), on the original pairs and the
    # teacher's.
    readme = (RECIPE / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [line for line in readme.splitlines() if "train.sh" in line and "--distilled_targets" in line]
    words = shlex.split(line, comments=True)
    positional, passed = words[2:6], words[6:]
    source, target, data_dir, output_dir = positional
    variables = {"data_dir": data_dir, "output_dir": output_dir, "source_lang": source, "target_lang": target}
    student = _parse(job_commands(JOB, variables, [], passed=passed)[TRAIN])
    recipe = _parse(job_commands(JOB, variables, [])[TRAIN])
    assert student[1].distilled_targets == [f"runs/distilled-{source}-{target}"]
    assert student[1].distillation_mix == "both"
    assert student[0] == recipe[0]  # the same model, tokenizer and scoring
    pairs = 29_000
    recipe_steps = -(-pairs // recipe[2].per_device_train_batch_size) * recipe[2].num_train_epochs
    student_steps = -(-2 * pairs // student[2].per_device_train_batch_size) * student[2].num_train_epochs
    assert abs(student_steps - recipe_steps) <= recipe[2].num_train_epochs  # one last partial batch an epoch
    # A checkpoint every epoch of the recipe (the last batch of an epoch falls in the next interval).
    assert (student[2].save_strategy, student[2].save_steps) == (
        "steps",
        pairs // recipe[2].per_device_train_batch_size,
    )
    changed = {"distilled_targets", "distillation_mix", "num_train_epochs", "save_strategy", "save_steps"}
    for settings, recipe_settings in ((vars(student[1]), vars(recipe[1])), (student[2].to_dict(), recipe[2].to_dict())):
        assert {k: v for k, v in settings.items() if k not in changed} == {
            k: v for k, v in recipe_settings.items() if k not in changed
        }
