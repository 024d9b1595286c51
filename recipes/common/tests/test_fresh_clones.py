"""recipes.common.fresh_clones: a job run in fresh clones of the last commit, its runs' times, scores and weights
reported side by side."""

import json
import subprocess

import pytest

from recipes.common import fresh_clones

# A stand-in for scripts/main_job.sh: counts its runs in the file it is given (outside the clone), fails after
# $FAIL_AFTER runs, lists the clones beside its own, writes weights that differ between runs only under $WEIGHTS_VARY,
# a checkpoint and a score.
JOB = """#!/usr/bin/env bash
set -euo pipefail
n=$(( $(cat "$1") + 1 )); echo "$n" > "$1"
ls .. > "$1.beside-$n"  # the clones there while this one runs
[ "$n" -le "${FAIL_AFTER:-99}" ] || { echo "the job broke"; exit 3; }
mkdir -p runs/nsmc/checkpoint-1
printf "weights-${WEIGHTS_VARY:+$n}" > runs/nsmc/model.safetensors
echo "{\\"test_accuracy\\": 0.88$n}" > runs/nsmc/results.json
echo "precision: float32, as asked"
echo "{'train_runtime': '12.5', 'train_loss': '6.9'}"  # two trainings' last log lines, as transformers 5 writes them
echo "{'train_runtime': 3.25, 'epoch': 2.0}"
echo "main job finished in 3 s (after installing); results in runs/nsmc/results.json"
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository whose last commit holds the job, and a run counter beside it; the working folder is tmp_path,
    so the job's argument ``count.txt`` is a relative path that names a file only from here."""
    folder = tmp_path / "repo"
    (folder / "scripts").mkdir(parents=True)
    (folder / "scripts" / "job.sh").write_text(JOB)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(folder)]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "job"], check=True)
    (tmp_path / "count.txt").write_text("0")
    (tmp_path / "clones").mkdir()
    monkeypatch.chdir(tmp_path)
    for name in ("FAIL_AFTER", "WEIGHTS_VARY", *fresh_clones.COMPUTE_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    return folder


def run(repo, tmp_path, *options, report="r.md"):
    argv = ["--repo", str(repo), "--workdir", str(tmp_path / "clones"), "--output", str(tmp_path / "out" / report)]
    return fresh_clones.main([*argv, *options, "--", "scripts/job.sh", "count.txt"])


def test_each_run_is_a_fresh_clone_and_the_report_sets_the_runs_side_by_side(repo, tmp_path):
    assert run(repo, tmp_path, "--runs", "2", "--keep", str(tmp_path / "kept")) == 0
    assert (tmp_path / "count.txt").read_text().strip() == "2"  # the relative argument reached both runs
    report = json.loads((tmp_path / "out" / "r.json").read_text())
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert report["commit"] == commit.strip() and report["cpu"] and report["settings"] == []
    runs = report["runs"]
    assert [r["metric"] for r in runs] == [0.881, 0.882] and [r["job_seconds"] for r in runs] == [3.0, 3.0]
    assert all(r["precision"] == "float32, as asked" and r["seconds_with_install"] >= 0 for r in runs)
    assert all(r["training_seconds"] == [12.5, 3.25] for r in runs)
    assert runs[0]["weights_sha256"] == runs[1]["weights_sha256"]
    text = (tmp_path / "out" / "r.md").read_text()
    assert "| 1 | 88.1000% |" in text and "| 2 | 88.2000% |" in text and "| 3 | 12.5, 3.25 |" in text
    assert "88.1000% to 88.2000% over 2 run(s)" in text and "the same weights byte for byte in every run" in text
    assert "main job finished" in (tmp_path / "out" / "r" / "run-2.log").read_text()
    # Each clone is gone after its run (a job's clone holds a whole environment); its job folder is kept without
    # checkpoints where asked.
    assert (tmp_path / "count.txt.beside-2").read_text().split() == ["clone-2"]
    assert not list((tmp_path / "clones").iterdir())
    kept = tmp_path / "kept" / "run-1"
    assert (kept / "model.safetensors").read_text() == "weights-" and not (kept / "checkpoint-1").exists()


def test_different_weights_are_counted(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTS_VARY", "1")
    assert run(repo, tmp_path, "--runs", "2") == 0
    assert "2 different weights" in (tmp_path / "out" / "r.md").read_text()


def test_a_failed_run_stops_the_series_and_keeps_the_runs_before_it(repo, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAIL_AFTER", "1")
    assert run(repo, tmp_path, "--runs", "3") == 1
    runs = json.loads((tmp_path / "out" / "r.json").read_text())["runs"]
    assert [r["returncode"] for r in runs] == [0, 3] and [r["failure"] for r in runs] == [None, "exit status 3"]
    assert "| 2 | failed (exit status 3;" in (tmp_path / "out" / "r.md").read_text()
    assert "run 2 failed (exit status 3)" in capsys.readouterr().out
    assert "the job broke" in (tmp_path / "out" / "r" / "run-2.log").read_text()
    assert not list((tmp_path / "clones").iterdir())


def test_a_job_that_writes_elsewhere_is_a_failed_run_that_names_the_file(repo, tmp_path, capsys):
    assert run(repo, tmp_path, "--results", "runs/other/results.json") == 1
    runs = json.loads((tmp_path / "out" / "r.json").read_text())["runs"]
    assert runs[0]["returncode"] == 0 and runs[0]["failure"] == "no runs/other/results.json"
    assert "metric" not in runs[0]
    assert "| 1 | failed (no runs/other/results.json;" in (tmp_path / "out" / "r.md").read_text()
    assert "run 1 failed (no runs/other/results.json)" in capsys.readouterr().out
    assert not list((tmp_path / "clones").iterdir())
    assert run(repo, tmp_path, "--metric", "test_f1", report="f1.md") == 1
    runs = json.loads((tmp_path / "out" / "f1.json").read_text())["runs"]
    assert runs[0]["failure"] == "no test_f1 in runs/nsmc/results.json"


def test_a_report_without_its_suffix_or_over_an_earlier_series_is_refused_before_any_run(repo, tmp_path, capsys):
    assert run(repo, tmp_path, "--runs", "1", "--keep", str(tmp_path / "kept")) == 0
    kept = sorted(path.name for path in (tmp_path / "kept" / "run-1").iterdir())
    for options, report, said in (
        ([], "r.md", "an earlier series' files are there"),  # its report and log
        (["--keep", str(tmp_path / "kept")], "other.md", "kept/run-1"),  # a kept folder would be merged into
        ([], "report", "the report is a .md file"),  # its logs would go in the folder of the report's own name
    ):
        with pytest.raises(SystemExit):
            run(repo, tmp_path, *options, report=report)
        assert said in capsys.readouterr().err
    assert (tmp_path / "count.txt").read_text().strip() == "1"  # no run after the first
    assert sorted(path.name for path in (tmp_path / "kept" / "run-1").iterdir()) == kept


def test_a_job_that_is_not_in_the_repository_or_no_run_is_refused(repo, tmp_path, capsys):
    argv = ["--repo", str(repo), "--output", str(tmp_path / "r.md")]
    with pytest.raises(SystemExit):
        fresh_clones.main([*argv, "--", "scripts/absent.sh"])
    assert "scripts/absent.sh is not a file of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fresh_clones.main([*argv, "--runs", "0", "--", "scripts/job.sh"])
    assert "--runs must be at least 1, not 0" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    not_git = tmp_path / "not-git"
    (not_git / "scripts").mkdir(parents=True)
    (not_git / "scripts" / "job.sh").write_text(JOB)
    for options, said in (
        (["--keep", str(tmp_path / "a-file")], "--keep {} is a file; give a folder"),
        (["--log_dir", str(tmp_path / "a-file")], "--log_dir {} is a file; give a folder"),
        (["--workdir", str(tmp_path / "absent")], "--workdir {}: no such folder"),
        (["--repo", str(not_git)], "--repo {}: not a git repository (fatal: not a git repository"),
    ):
        with pytest.raises(SystemExit):
            fresh_clones.main([*argv, *options, "--", "scripts/job.sh"])
        assert said.format(options[1]) in capsys.readouterr().err
    assert (tmp_path / "count.txt").read_text().strip() == "0" and not (tmp_path / "r.md").exists()


def test_the_settings_that_change_the_arithmetic_are_named(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TRANSFORMER_PRECISION", "float32")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # set but empty: nothing to name
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    assert run(repo, tmp_path) == 0
    settings = ["HF_TRANSFORMER_PRECISION=float32", "ATEN_CPU_CAPABILITY=avx2"]
    assert json.loads((tmp_path / "out" / "r.json").read_text())["settings"] == settings
    assert " (HF_TRANSFORMER_PRECISION=float32 ATEN_CPU_CAPABILITY=avx2)." in (tmp_path / "out" / "r.md").read_text()


def test_only_paths_outside_the_repository_are_made_absolute(repo, tmp_path, monkeypatch):
    # An output folder inside the checkout (runs/nsmc, left by an earlier run there) stays relative: the clone writes
    # its own, not the checkout's. The data beside the repository is named absolutely, for the clone elsewhere.
    (repo / "runs" / "nsmc").mkdir(parents=True)
    monkeypatch.chdir(repo)
    arguments = fresh_clones.absolute_arguments(["../count.txt", "runs/nsmc", "runs/absent", "--flag"], repo)
    assert arguments == [str(tmp_path / "count.txt"), "runs/nsmc", "runs/absent", "--flag"]
