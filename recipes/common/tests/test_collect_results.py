"""scripts/collect_results.py: docs/results.md, results.json and learning curves from finished run folders."""

import json
import shutil

import pytest
from launch_utils import load_script, write_nsmc
from matplotlib import image as mpimg

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


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    """A real (tiny) train_classifier.py run folder."""
    root = tmp_path_factory.mktemp("collect")
    write_nsmc(root / "data", 300, seed=1, name="ratings_train.txt")
    write_nsmc(root / "data", 50, seed=2, name="ratings_test.txt")
    load_script("train_classifier").main(
        ["--output_dir", str(root / "runs" / "tiny-nsmc"), "--data_dir", str(root / "data"), "--vocab_size", "120"]
        + ["--d_model", "16", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "32"]
        + ["--max_length", "16", "--num_train_epochs", "2", "--per_device_train_batch_size", "32"]
        + ["--eval_strategy", "epoch", "--save_strategy", "no", "--logging_steps", "2", "--report_to", "none"]
        + ["--disable_tqdm", "true", "--use_cpu", "--seed", "0"]
    )
    return root


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
    out = tmp_path / "docs"
    records = load_script("collect_results").main(
        ["--manifest", str(root / "manifest.json"), "--output_dir", str(out), "--base_dir", str(root)]
    )

    saved = json.loads((out / "results.json").read_text())
    assert saved == records and all(KEYS <= set(record) for record in saved)
    by_run = {}
    for record in saved:
        by_run.setdefault(record["run"], []).append(record)
    assert set(by_run) == {"tiny-nsmc", "pretraining", "nsmc-pretrained", "m30k-en-de"}

    tiny = {(r["metric"], r["split"]): r for r in by_run["tiny-nsmc"]}
    real = json.loads((root / "runs" / "tiny-nsmc" / "results.json").read_text())
    assert tiny[("accuracy", "test")]["value"] == real["test_accuracy"]
    assert tiny[("accuracy", "validation")]["value"] == real["eval_accuracy"]
    assert tiny[("accuracy", "test")]["params"] == real["parameters"] > 0
    assert tiny[("accuracy", "test")]["wall_seconds"] == real["wall_seconds"] > 0
    assert tiny[("accuracy", "test")]["command"] == "python scripts/" + real["command"]
    assert "--output_dir" in real["command"] and "--vocab_size 120" in real["command"]

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

    text = (out / "results.md").read_text()
    assert text.startswith("# Results") and "a test machine" in text
    assert "| 87.00% | 86.50% | yes |" in text  # the fine-tuned classifier meets the target
    assert "| 30.50 | 38.00 | no |" in text
    assert "2 min 50 s (pretraining 2 min 00 s + this run 0 min 50 s)" in text
    assert "started from the pretrained encoder" in text and "from scratch" in text
    assert "![learning curves of m30k-en-de](results/m30k-en-de.png)" in text
    assert "python scripts/train_classifier.py --output_dir" in text


def test_a_run_without_results_is_an_error(tmp_path):
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [{"dir": str(tmp_path / "unfinished")}]}))
    with pytest.raises(FileNotFoundError, match="results.json"):
        load_script("collect_results").main(
            ["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "out")]
        )


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
    records = load_script("collect_results").main(
        ["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "docs")]
    )
    assert {r["metric"] for r in records} == {"bleu"} and records[0]["value"] == 31.5
    assert all(r["wall_seconds"] == 1350.0 for r in records)  # 600 + 660 s of training, 90 s of scoring
    assert records[0]["command"] == (
        "python scripts/train_translation.py a && torchrun --nproc_per_node 2 scripts/train_translation.py b && "
        "python scripts/evaluate_translation.py --model_dirs runs/a runs/b"
    )
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "22 min 30 s (the members' runs 21 min 00 s + this scoring 1 min 30 s)" in text


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
    collect = load_script("collect_results").main
    arguments = ["--manifest", str(tmp_path / "manifest.json"), "--output_dir", str(tmp_path / "docs")]
    first = collect(arguments)
    first_text = (tmp_path / "docs" / "results.md").read_text()
    assert "11 min 30 s (the model's training run 10 min 00 s + this scoring 1 min 30 s)" in first_text

    # Another machine: no run folders, a note rewritten. Every figure, command and time is the published one.
    shutil.rmtree(tmp_path / "runs")
    manifest["runs"][0]["note"] = "second words"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    second = collect(arguments)
    assert second == [dict(record, note="second words" if record["run"] == "a" else record["note"]) for record in first]
    assert (tmp_path / "docs" / "results.md").read_text() == first_text.replace("first words", "second words")
    assert (tmp_path / "docs" / second[0]["curve"]).is_file()

    # An unfinished run is still an error, published records or not.
    (tmp_path / "runs" / "a").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="results.json"):
        collect(arguments)
    shutil.rmtree(tmp_path / "runs")
    manifest["runs"].append({"dir": str(tmp_path / "runs" / "never"), "name": "never"})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="results.json"):
        collect(arguments)
