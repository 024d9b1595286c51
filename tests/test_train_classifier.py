"""The NSMC training script, end to end on generated reviews in the NSMC file format."""

import json

import torch
from launch_utils import load_script, write_nsmc
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def test_train_classifier_end_to_end(tmp_path, recwarn):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_nsmc(data_dir, 600, seed=1, name="ratings_train.txt", empty_rows=1)
    write_nsmc(data_dir, 100, seed=2, name="ratings_test.txt", empty_rows=1)
    results = load_script("train_classifier").main(
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
            "--seed",
            "0",
        ]
    )
    assert results["test_samples"] == 100
    # Without --use_cpu, pinned memory is turned off on a CPU-only machine, so torch does not warn at every data
    # loader.
    if not torch.accelerator.is_available():
        assert not [w for w in recwarn if "pin_memory" in str(w.message)]
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
