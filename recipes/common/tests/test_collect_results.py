"""recipes.common.collect_results: a recipe's records (results.json, notes.md, learning curves) from finished run
folders, and the published records kept as they are where the folders are not."""

import argparse
import json
import shutil
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from recipes.common import collect_results
from recipes.common.collect_results import main as collect

REPO = Path(__file__).resolve().parents[3]
KEYS = {"task", "metric", "value", "split", "command", "params", "wall_seconds"}


def fake_run(folder, results, history):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "log_history.json").write_text(json.dumps(history))


HISTORY = [
    {"loss": 5.0, "learning_rate": 1e-3, "epoch": 0.5, "step": 10},
    {"eval_loss": 4.0, "eval_bleu": 3.0, "epoch": 1.0, "step": 20},
    {"loss": 3.0, "learning_rate": 5e-4, "epoch": 1.5, "step": 30},
    {"eval_loss": 2.5, "eval_bleu": 9.0, "epoch": 2.0, "step": 40},
    {"train_runtime": 12.0, "epoch": 2.0, "step": 40},
]
# A classifier's folder as train_classifier.py leaves it (its own tests check that it writes these keys).
CLASSIFIER = {
    "task": "nsmc_sentiment",
    "test_accuracy": 0.8512,
    "test_f1": 0.8498,
    "eval_accuracy": 0.8475,
    "parameters": 2_453_506,
    "wall_seconds": 130.2,
    "command": "train_classifier.py --output_dir runs/tiny-nsmc --data_dir data --vocab_size 120 --seed 0",
}
CLASSIFIER_HISTORY = [
    {"loss": 0.69, "learning_rate": 1e-3, "epoch": 0.5, "step": 5},
    {"eval_loss": 0.5, "eval_accuracy": 0.8, "eval_f1": 0.79, "epoch": 1.0, "step": 10},
    {"loss": 0.41, "learning_rate": 5e-4, "epoch": 1.5, "step": 15},
    {"eval_loss": 0.45, "eval_accuracy": 0.8475, "eval_f1": 0.84, "epoch": 2.0, "step": 20},
    {"train_runtime": 100.0, "epoch": 2.0, "step": 20},
]


@pytest.fixture
def classifier_run(tmp_path):
    fake_run(tmp_path / "runs" / "tiny-nsmc", CLASSIFIER, CLASSIFIER_HISTORY)
    return tmp_path


@pytest.mark.slow
def test_collects_runs_into_markdown_json_and_curves(classifier_run, tmp_path):
    root = classifier_run
    fake_run(
        root / "runs" / "mlm0",
        {
            "task": "nsmc_denoising_pretraining",
            "eval_loss": 4.0,
            "parameters": 900,
            "wall_seconds": 20.0,
            "command": "pretrain_denoising.py --output_dir runs/mlm0",
        },
        [{"loss": 7.0, "step": 5, "epoch": 1.0}],
    )
    fake_run(
        root / "runs" / "mlm",
        {
            "task": "nsmc_denoising_pretraining",
            "eval_loss": 3.21,
            "eval_masked_accuracy": 0.4,
            "parameters": 900,
            "wall_seconds": 100.0,
            "init_from": "runs/mlm0",
            "command": "pretrain_denoising.py --init_from runs/mlm0 --output_dir runs/mlm",
        },
        [{"loss": 6.0, "step": 5, "epoch": 1.0}, {"eval_loss": 3.21, "step": 5, "epoch": 1.0}],
    )
    fake_run(
        root / "runs" / "finetuned",
        {
            "task": "nsmc_sentiment",
            "init_from": "runs/mlm",
            "test_accuracy": 0.87,
            "test_f1": 0.86,
            "eval_accuracy": 0.88,
            "parameters": 1000,
            "wall_seconds": 50.5,
            "command": "train_classifier.py --init_from runs/mlm --output_dir runs/finetuned",
        },
        [{"loss": 0.5, "step": 5, "epoch": 1.0}, {"eval_loss": 0.3, "eval_accuracy": 0.88, "step": 5, "epoch": 1.0}],
    )
    # An older translation folder without a task key; its log history holds a final evaluation to leave out.
    fake_run(
        root / "runs" / "m30k",
        {
            "test_bleu": 30.5,
            "test_greedy_bleu": 29.0,
            "eval_bleu": 31.0,
            "source_lang": "en",
            "target_lang": "de",
            "parameters": 5000,
            "wall_seconds": 1800.0,
            "world_size": 2,
            "command": "train_translation.py --output_dir runs/m30k",
        },
        HISTORY + [{"eval_loss": 2.4, "eval_bleu": 9.5, "epoch": 2.0, "step": 40}],
    )
    manifest = {
        "title": "Results",
        "machine": "a test machine",
        "targets": {
            "nsmc_sentiment": {"metric": "accuracy", "split": "test", "value": 0.865},
            "translation_en_to_de": {"metric": "bleu", "split": "test2016", "value": 38},
        },
        "runs": [
            {"dir": "runs/tiny-nsmc", "note": "from scratch"},
            {"dir": "runs/mlm", "name": "pretraining"},
            {"dir": "runs/finetuned", "name": "nsmc-pretrained", "note": "started from the pretrained encoder"},
            {"dir": str(root / "runs" / "m30k"), "name": "m30k-en-de"},
        ],
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "records"
    records = collect(["--manifest", str(root / "manifest.json"), "--output_dir", str(out), "--base_dir", str(root)])

    saved = json.loads((out / "results.json").read_text())
    assert saved == records and all(KEYS <= set(record) for record in saved)
    by_run = {}
    for record in saved:
        by_run.setdefault(record["run"], []).append(record)
    assert set(by_run) == {"tiny-nsmc", "pretraining", "nsmc-pretrained", "m30k-en-de"}

    tiny = {(r["metric"], r["split"]): r for r in by_run["tiny-nsmc"]}
    assert tiny[("accuracy", "test")]["value"] == CLASSIFIER["test_accuracy"]
    assert tiny[("f1", "test")]["value"] == CLASSIFIER["test_f1"]
    assert tiny[("accuracy", "validation")]["value"] == CLASSIFIER["eval_accuracy"]
    assert tiny[("accuracy", "test")]["params"] == CLASSIFIER["parameters"]
    assert tiny[("accuracy", "test")]["wall_seconds"] == CLASSIFIER["wall_seconds"]
    assert tiny[("accuracy", "test")]["command"] == "python scripts/" + CLASSIFIER["command"]

    # The fine-tuned classifier counts its pretraining, followed back through the continued run: every
    # command, the summed wall time.
    finetuned = by_run["nsmc-pretrained"][0]
    assert finetuned["wall_seconds"] == 170.5
    assert finetuned["command"] == (
        "python scripts/pretrain_denoising.py --output_dir runs/mlm0 && "
        "python scripts/pretrain_denoising.py --init_from runs/mlm0 --output_dir runs/mlm && "
        "python scripts/train_classifier.py --init_from runs/mlm --output_dir runs/finetuned"
    )
    assert by_run["pretraining"][0]["wall_seconds"] == 120.0
    assert {r["metric"] for r in by_run["pretraining"]} == {"masked_token_loss", "masked_token_accuracy"}
    translation = {(r["metric"], r["split"]): r["value"] for r in by_run["m30k-en-de"]}
    assert translation == {("bleu", "test2016"): 30.5, ("bleu_greedy", "test2016"): 29.0, ("bleu", "validation"): 31.0}
    assert by_run["m30k-en-de"][0]["task"] == "translation_en_to_de"
    # A run of two processes is shown launched as it ran.
    assert (
        by_run["m30k-en-de"][0]["command"]
        == "torchrun --nproc_per_node 2 scripts/train_translation.py --output_dir runs/m30k"
    )

    for run in by_run.values():
        curve = out / run[0]["curve"]
        assert curve.is_file() and mpimg.imread(curve).shape[0] > 100

    text = (out / "notes.md").read_text()
    assert text.startswith("# Results") and "a test machine" in text
    assert "| 87.00% | 86.50% | yes |" in text  # the fine-tuned classifier meets the target
    assert "| 30.50 | 38.00 | no |" in text
    assert "2 min 50 s (pretraining 2 min 00 s + this run 0 min 50 s)" in text
    assert "started from the pretrained encoder" in text and "from scratch" in text
    assert "![learning curves of m30k-en-de](curves/m30k-en-de.png)" in text
    assert "python scripts/train_classifier.py --output_dir" in text


def test_a_run_without_results_is_an_error(tmp_path):
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [{"dir": str(tmp_path / "unfinished")}]}))
    with pytest.raises(FileNotFoundError, match="results.json"):
        collect(["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "out")])


@pytest.mark.parametrize(
    ("manifest", "told"),
    [
        ([{"dir": "runs/a"}], "is not a JSON object"),
        ({"title": "x"}, "no 'runs'"),
        ({"runs": [{"dir": "runs/a"}], "intr": ["typo"]}, "unknown key 'intr' \\(known: title, machine, "),
        ({"runs": [{"name": "a"}]}, "run 1: no 'dir'"),
        ({"runs": [{"dir": "runs/a", "nte": "typo"}]}, "run 1: unknown key 'nte'"),
        ({"runs": [{"dir": "runs/a"}, {"dir": 3}]}, "run 2: 'dir' must be text, got 3"),
        ({"runs": [], "intro": "one paragraph"}, "'intro' must be a list"),
        ({"runs": [], "intro": [["nested"]]}, "'intro' must be a list of paragraphs"),
        ({"runs": [], "targets": {"nsmc_sentiment": {"metric": "accuracy", "split": "test"}}}, "no 'value'"),
        ({"runs": [], "targets": {"t": {"metric": "bleu", "split": "test", "value": "38"}}}, "'value' must be a num"),
        ({"runs": [{"dir": "a/x"}, {"dir": "b/x"}]}, "two runs named x"),
    ],
)
def test_a_manifest_of_another_shape_is_refused_naming_what_is_wrong(manifest, told, tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"--manifest {path}.*{told}"):
        collect(["--manifest", str(path), "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # refused before anything is written
    path.write_text("{'runs': []}")
    with pytest.raises(ValueError, match="is not JSON"):
        collect(["--manifest", str(path), "--output_dir", str(tmp_path / "out")])


def test_the_manifest_names_the_task_a_general_script_recorded_and_each_part_is_recorded(tmp_path):
    results = {
        **CLASSIFIER, "task": "text_classification", "test_encoder_accuracy": 0.84, "eval_encoder_accuracy": 0.83,
        "eval_ngram_accuracy": 0.82,
    }  # fmt: skip
    fake_run(tmp_path / "runs" / "ngram", results, CLASSIFIER_HISTORY)
    manifest = {
        "title": "Results",
        "targets": {"nsmc_sentiment": {"metric": "accuracy", "split": "test", "value": 0.865}},
        "runs": [{"dir": str(tmp_path / "runs" / "ngram"), "name": "ngram", "task": "nsmc_sentiment"}],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    records = collect(["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "records")])
    found = {(r["task"], r["metric"], r["split"]): r["value"] for r in records}
    assert found[("nsmc_sentiment", "accuracy", "test")] == 0.8512
    assert found[("nsmc_sentiment", "accuracy_encoder_alone", "test")] == 0.84
    assert found[("nsmc_sentiment", "accuracy_ngram_alone", "validation")] == 0.82
    notes = (tmp_path / "records" / "notes.md").read_text()
    assert "| 86.50% | no |" in notes  # the recipe's target applies
    # Each part of the score reads as the score does: a percentage, not a fraction beside one.
    assert "| accuracy_encoder_alone | test | 84.00% |" in notes
    assert "| accuracy_ngram_alone | validation | 82.00% |" in notes


def test_an_ensemble_counts_its_members_runs_and_commands(tmp_path):
    member = {"task": "translation_en_to_de", "test_bleu": 30.0, "wall_seconds": 600.0}
    fake_run(tmp_path / "runs" / "a", {**member, "command": "train_translation.py --output_dir runs/a"}, HISTORY)
    ensemble_dir = tmp_path / "runs" / "ab"
    ensemble_dir.mkdir(parents=True)
    members = [
        {"folder": f"runs/{name}", "bleu": 30.0, "wall_seconds": seconds, "command": f"train_translation.py {name}"}
        for name, seconds in (("a", 600.0), ("b", 660.0))
    ]
    members[1]["world_size"] = 2  # trained as two processes
    results = {
        "task": "translation_en_to_de", "test_bleu": 31.5, "eval_bleu": 32.0, "parameters": 2000,
        "wall_seconds": 90.0, "ensemble": members, "command": "evaluate_translation.py --model_dirs runs/a runs/b",
    }  # fmt: skip
    (ensemble_dir / "results.json").write_text(json.dumps(results))  # no log history: no learning curve
    manifest = {"title": "Results", "runs": [{"dir": str(ensemble_dir), "name": "ensemble"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    records = collect(["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "records")])
    assert {r["metric"] for r in records} == {"bleu"} and records[0]["value"] == 31.5
    assert all(r["wall_seconds"] == 1350.0 for r in records)  # 600 + 660 s of training, 90 s of scoring
    assert records[0]["command"] == (
        "python scripts/train_translation.py a && torchrun --nproc_per_node 2 scripts/train_translation.py b && "
        "python scripts/evaluate_translation.py --model_dirs runs/a runs/b"
    )
    text = (tmp_path / "records" / "notes.md").read_text()
    assert "22 min 30 s (the members' runs 21 min 00 s + this scoring 1 min 30 s)" in text


@pytest.mark.slow
def test_a_run_folder_not_on_this_machine_keeps_its_published_records(tmp_path):
    member = {"task": "translation_en_to_de", "test_bleu": 30.0, "eval_bleu": 31.0, "parameters": 500}
    member.update(wall_seconds=600.0, command="train_translation.py --output_dir runs/a")
    fake_run(tmp_path / "runs" / "a", member, HISTORY)
    ensemble_dir = tmp_path / "runs" / "ab"
    ensemble_dir.mkdir(parents=True)
    members = [{"folder": "runs/a", "wall_seconds": 600.0, "command": "train_translation.py a"}]
    ensemble = {"task": "translation_en_to_de", "test_bleu": 31.5, "parameters": 1000, "wall_seconds": 90.0}
    ensemble.update(ensemble=members, command="evaluate_translation.py --model_dirs runs/a")
    (ensemble_dir / "results.json").write_text(json.dumps(ensemble))
    manifest = {
        "title": "Results",
        "runs": [
            {"dir": str(tmp_path / "runs" / "a"), "name": "a", "note": "first words"},
            {"dir": str(ensemble_dir), "name": "ab", "note": "an ensemble"},
        ],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    arguments = ["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "records")]
    first = collect(arguments)
    first_text = (tmp_path / "records" / "notes.md").read_text()
    assert "11 min 30 s (the model's training run 10 min 00 s + this scoring 1 min 30 s)" in first_text

    # Another machine: no run folders, a note rewritten. Every figure, command and time is the published one.
    shutil.rmtree(tmp_path / "runs")
    manifest["runs"][0]["note"] = "second words"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    second = collect(arguments)
    assert second == [dict(record, note="second words" if record["run"] == "a" else record["note"]) for record in first]
    assert (tmp_path / "records" / "notes.md").read_text() == first_text.replace("first words", "second words")
    assert (tmp_path / "records" / second[0]["curve"]).is_file()

    # An unfinished run is still an error, published records or not.
    (tmp_path / "runs" / "a").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="results.json"):
        collect(arguments)
    shutil.rmtree(tmp_path / "runs")
    manifest["runs"].append({"dir": str(tmp_path / "runs" / "never"), "name": "never"})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="results.json"):
        collect(arguments)


def test_a_recipe_steps_module_command_runs_with_python_m():
    shell = collect_results.shell_command
    assert shell("recipes.multi30k.evaluate --model_dirs a b") == "python -m recipes.multi30k.evaluate --model_dirs a b"
    assert (
        shell("recipes.multi30k.train --seed 1", 2) == "torchrun --nproc_per_node 2 -m recipes.multi30k.train --seed 1"
    )
    assert shell("train_translation.py --seed 1") == "python scripts/train_translation.py --seed 1"
    assert shell("timeout 600 python scripts/a.py") == "timeout 600 python scripts/a.py"  # written out: kept


@pytest.mark.parametrize("recipe", ["nsmc", "multi30k"])
def test_published_records_regenerate_unchanged(recipe, tmp_path):
    """Each recipe's records as collect_results leaves them on a machine without the run folders: its command in the
    notes, on the manifest as published, writes every file back unchanged (a manifest edited without running it
    again, or a record edited by hand, fails here)."""
    records = REPO / "recipes" / recipe / "records"
    shutil.copytree(records, tmp_path / "records")
    command = collect_results.rerun_command(
        argparse.Namespace(manifest=f"recipes/{recipe}/records/runs.json", output_dir=f"recipes/{recipe}/records",
                           base_dir=".")
    )  # fmt: skip
    written = collect_results.write_outputs(tmp_path / "records" / "runs.json", tmp_path / "records", tmp_path, command)
    for name in ("results.json", "notes.md"):
        assert (tmp_path / "records" / name).read_bytes() == (records / name).read_bytes(), name
    # Every learning curve a record names is kept, and the notes show each kept one.
    curves = {record["curve"] for record in written if record["curve"]}
    assert curves == {f"curves/{path.name}" for path in (records / "curves").glob("*.png")}
    notes = (records / "notes.md").read_text()
    assert all(f"]({curve})" in notes for curve in curves)


def test_times_round_once_and_a_pretraining_of_unknown_time_is_not_counted_as_none(tmp_path):
    assert collect_results.minutes(119.6) == "2 min 00 s" and collect_results.minutes(4919.5) == "82 min 00 s"
    assert collect_results.minutes(59.4) == "0 min 59 s" and collect_results.minutes(None) == "n/a"
    root = tmp_path
    fake_run(root / "runs" / "pre", {"task": "nsmc_denoising_pretraining", "command": "pretrain"}, [])
    fake_run(
        root / "runs" / "cls",
        {"task": "nsmc_sentiment", "init_from": "runs/pre", "test_accuracy": 0.8, "wall_seconds": 300.0},
        [],
    )
    manifest = root / "runs.json"
    manifest.write_text(json.dumps({"title": "t", "runs": [{"dir": "runs/cls", "name": "cls"}]}))
    collect(["--manifest", str(manifest), "--output_dir", str(root / "records"), "--base_dir", str(root)])
    notes = (root / "records" / "notes.md").read_text()
    assert "pretraining 0 min 00 s" not in notes
