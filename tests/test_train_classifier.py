"""The NSMC training script, end to end on generated reviews in the NSMC file format."""

import importlib.util
import json
import random
import sys
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_classifier.py"
POSITIVE = ["정말 재미있다", "최고의 영화", "감동적이고 좋았다", "배우 연기가 훌륭하다", "또 보고 싶다"]
NEGATIVE = ["너무 지루하다", "최악의 영화", "시간이 아깝다", "연기가 어색하다", "다시는 안 본다"]


def write_nsmc(root: Path, rows: int, seed: int, name: str) -> None:
    rng = random.Random(seed)
    lines = ["id\tdocument\tlabel"]
    for i in range(rows):
        label = rng.randint(0, 1)
        words = rng.sample(POSITIVE if label else NEGATIVE, 2)
        lines.append(f"{seed * 100000 + i}\t{' '.join(words)}\t{label}")
    lines.append(f"{seed * 100000 + rows}\t\t1")  # an empty document: dropped and counted, never trained on
    (root / "nsmc").mkdir(parents=True, exist_ok=True)
    (root / "nsmc" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_script():
    spec = importlib.util.spec_from_file_location("train_classifier", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the script's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_train_classifier_end_to_end(tmp_path):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_nsmc(data_dir, 600, seed=1, name="ratings_train.txt")
    write_nsmc(data_dir, 100, seed=2, name="ratings_test.txt")
    results = load_script().main(
        [
            "--output_dir",
            str(output_dir),
            "--data_dir",
            str(data_dir),
            "--vocab_size",
            "200",
            "--d_model",
            "32",
            "--num_layers",
            "1",
            "--num_heads",
            "2",
            "--intermediate_size",
            "64",
            "--max_length",
            "32",
            "--num_train_epochs",
            "4",
            "--per_device_train_batch_size",
            "32",
            "--learning_rate",
            "2e-3",
            "--eval_strategy",
            "epoch",
            "--save_strategy",
            "epoch",
            "--save_total_limit",
            "1",
            "--load_best_model_at_end",
            "--metric_for_best_model",
            "accuracy",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
            "--use_cpu",
            "--seed",
            "0",
        ]
    )
    assert results["test_samples"] == 100
    assert results["test_accuracy"] > 0.9 and results["eval_accuracy"] > 0.9
    assert 0.0 <= results["test_f1"] <= 1.0

    saved = json.loads((output_dir / "results.json").read_text())
    assert saved["test_accuracy"] == results["test_accuracy"]
    card = (output_dir / "README.md").read_text()
    assert "pipeline_tag: text-classification" in card and f"{results['test_accuracy']:.4f}" in card
    assert (output_dir / "model.safetensors").is_file()

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    batch = tokenizer(["최고의 영화 정말 재미있다", "최악의 영화 시간이 아깝다"], return_tensors="pt", padding=True)
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    assert predicted == [1, 0]
    assert model.config.id2label[1] in ("positive", "1", "pos")
