"""scripts/train_classifier.py end to end on generated reviews in local files."""

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from tests.helpers.launch import load_script, review_files, write_reviews
from tests.helpers.models import card_settings, check_card_describes_folder, trained_with


@pytest.mark.slow
def test_train_classifier_end_to_end(tmp_path, recwarn):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_reviews(data_dir, 600, seed=1, name="train.jsonl", empty_rows=1)
    write_reviews(data_dir, 100, seed=2, name="test.jsonl", empty_rows=1)
    results = load_script("train_classifier").main(
        [
            "--output_dir",
            str(output_dir),
            *review_files(data_dir),
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
    card = check_card_describes_folder(output_dir, trained_with(output_dir))
    assert "pipeline_tag: text-classification" in card and f"{results['test_accuracy']:.4f}" in card
    # Exact counts: the rows trained on and scored (an empty row of each file dropped).
    assert (results["train_samples"], results["eval_samples"]) == (540, 60)
    assert "on 540 training rows of train.jsonl with a tokenizer trained on those rows" in card
    assert "| test (100 rows) |" in card and "base_model" not in card
    assert (output_dir / "model.safetensors").is_file()

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    batch = tokenizer(["최고의 영화 정말 재미있다", "최악의 영화 시간이 아깝다"], return_tensors="pt", padding=True)
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    assert predicted == [1, 0]
    assert model.config.id2label == {0: "negative", 1: "positive"}  # string labels become class names


TINY_CLASSIFIER = [
    "--vocab_size", "200", "--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "64",
    "--max_length", "32", "--per_device_train_batch_size", "32", "--learning_rate", "2e-3", "--report_to", "none",
    "--disable_tqdm", "true", "--seed", "0", "--use_cpu",
]  # fmt: skip


@pytest.mark.slow
def test_the_mean_of_the_last_checkpoints_is_scored_and_saved(tmp_path):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_reviews(data_dir, 300, seed=1, name="train.jsonl")
    write_reviews(data_dir, 40, seed=2, name="test.jsonl")
    arguments = ["--output_dir", str(output_dir), *review_files(data_dir), *TINY_CLASSIFIER]
    results = load_script("train_classifier").main(
        arguments
        + ["--max_steps", "5", "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2"]
        + ["--save_total_limit", "2", "--average_checkpoints", "2"]
    )
    # Checkpoints at steps 2, 4 and 5, two kept: the saved model is the mean of the last two, and it is the one scored.
    assert results["averaged_checkpoints"] == ["checkpoint-4", "checkpoint-5"]
    folders = [output_dir, *(output_dir / name for name in results["averaged_checkpoints"])]
    final, *last_two = (load_file(str(folder / "model.safetensors")) for folder in folders)
    assert max((last_two[0][name] - last_two[1][name]).abs().max() for name in final) > 1e-4  # steps 4 and 5 differ
    for name, tensor in final.items():
        torch.testing.assert_close(tensor, (last_two[0][name] + last_two[1][name]) / 2, rtol=0, atol=1e-6)
    card = (output_dir / "README.md").read_text()
    assert "Its weights are the mean of the last 2 checkpoints (checkpoint-4, checkpoint-5)." in card

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    rows = [json.loads(line) for line in (data_dir / "test.jsonl").read_text().splitlines()]
    texts, labels = [row["text"] for row in rows], [["negative", "positive"].index(row["label"]) for row in rows]
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=32)
    with torch.no_grad():
        logits = model(**batch).logits
    # The Trainer scored padded batches of its own; a row whose two logits nearly tie may go either way there.
    correct = logits.argmax(-1) == torch.tensor(labels)
    near_tie = (logits[:, 1] - logits[:, 0]).abs() < 1e-4
    fewest, most = (correct & ~near_tie).sum().item(), (correct | near_tie).sum().item()
    assert fewest / len(labels) - 1e-9 <= results["test_accuracy"] <= most / len(labels) + 1e-9


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--save_total_limit", "1"], "--average_checkpoints 2 needs .* --save_total_limit >= 2 \\(now 1\\)"),
        (["--save_strategy", "no"], "--average_checkpoints 2 needs .*--save_strategy \\(now no\\)"),
        (
            ["--load_best_model_at_end", "--eval_strategy", "epoch", "--metric_for_best_model", "accuracy"],
            "replaces the weights --load_best_model_at_end would load",
        ),
        (["--num_train_epochs", "1"], r"--average_checkpoints 2 needs that many checkpoints, and this run saves 1"),
        (
            ["--save_strategy", "steps", "--save_steps", "10", "--max_steps", "8"],
            r"needs that many checkpoints, and this run saves 1 \(--save_strategy steps",
        ),
    ],
)
def test_averaging_that_cannot_work_is_refused_before_training(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        load_script("train_classifier").main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "absent.jsonl"), *TINY_CLASSIFIER]
            + ["--average_checkpoints", "2", "--save_strategy", "epoch", *extra]
        )


def decided(logits: torch.Tensor, margin: float = 1e-4) -> torch.Tensor:
    """(N,): whether each row's best logit leads the next by more than rounding between code paths could move."""
    top = logits.topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]) > margin


def accuracy_and_ties(model, tokenizer, rows: list[dict]) -> tuple[float, float]:
    """The model's accuracy on labelled rows (one padded batch) and the share of them whose two logits tie to
    rounding: batched and padded otherwise than the script's pass, such a row may go either way on another CPU; rows
    out of order would move many."""
    with torch.no_grad():
        logits = model(**tokenizer([row["text"] for row in rows], return_tensors="pt", padding=True)).logits
    right = sum(model.config.id2label[p] == row["label"] for p, row in zip(logits.argmax(-1).tolist(), rows))
    return right / len(rows), int((~decided(logits)).sum()) / len(rows)


@pytest.mark.slow
def test_the_ngram_score_is_fitted_after_training_and_saved_with_the_folder(tmp_path, monkeypatch):
    from transformers import pipeline

    from hf_transformer.trainer import LengthGroupedTrainer

    predicted_splits = []  # each pass of Trainer.predict, by its metrics' prefix
    predict = LengthGroupedTrainer.predict

    def counted_predict(self, dataset, *args, **kwargs):
        predicted_splits.append(kwargs.get("metric_key_prefix"))
        return predict(self, dataset, *args, **kwargs)

    monkeypatch.setattr(LengthGroupedTrainer, "predict", counted_predict)
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_reviews(data_dir, 300, seed=1, name="train.jsonl")
    write_reviews(data_dir, 60, seed=3, name="validation.jsonl")
    write_reviews(data_dir, 40, seed=2, name="test.jsonl")
    arguments = ["--output_dir", str(output_dir), *review_files(data_dir), *TINY_CLASSIFIER]
    results = load_script("train_classifier").main(
        arguments + ["--validation_file", str(data_dir / "validation.jsonl"), "--max_steps", "30"]
        + ["--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "30"]
        + ["--ngram_buckets", "4096", "--ngram_order", "2", "--train_sampling_strategy", "group_by_length"]
    )  # fmt: skip
    # Each part's validation accuracy is reported beside the sum's, and the encoder's alone on test. (The script
    # evaluates rows sorted by length, in another order than the dataset's: the fit pairs each row with its own logits.)
    for key in ("eval_encoder_accuracy", "eval_ngram_accuracy", "test_encoder_accuracy", "ngram_logit_scale"):
        assert key in results, key
    assert results["eval_ngram_accuracy"] > 0.9  # the words tell the label
    # The checkpoint Trainer saved holds the n-gram score still at zero: the encoder's training left it alone.
    trained = load_file(str(output_dir / "checkpoint-30" / "model.safetensors"))
    assert not trained["ngram_classifier.weight"].any()
    # The encoder's validation accuracy reported is that checkpoint's on the validation rows in their order.
    encoder = AutoModelForSequenceClassification.from_pretrained(output_dir / "checkpoint-30").eval()
    validation = [json.loads(line) for line in (data_dir / "validation.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (data_dir / "test.jsonl").read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    accuracy, ties = accuracy_and_ties(encoder, tokenizer, validation)
    assert accuracy > 0.6
    assert abs(accuracy - results["eval_encoder_accuracy"]) <= ties + 1e-9
    # The test rows are scored once, and that pass also gives the encoder's accuracy alone: the checkpoint's on them.
    assert predicted_splits == ["test"]
    accuracy, ties = accuracy_and_ties(encoder, tokenizer, rows)
    assert abs(accuracy - results["test_encoder_accuracy"]) <= ties + 1e-9
    saved = load_file(str(output_dir / "model.safetensors"))
    assert saved["ngram_classifier.weight"].any() and saved["ngram_classifier.idf"].any()

    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    # Character n-grams unless asked otherwise, read through the tokenizer's pieces.
    assert (model.config.classifier_ngram_buckets, model.config.classifier_ngram_order) == (4096, 2)
    assert model.config.classifier_ngram_unit == "character" and model.ngram_classifier.token_characters.any()
    texts = [row["text"] for row in rows]
    with torch.no_grad():
        logits = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits
    served = [item["label"] for item in pipeline("text-classification", model=str(output_dir))(texts)]
    clear = decided(logits).tolist()
    expected = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    assert [s for s, c in zip(served, clear) if c] == [e for e, c in zip(expected, clear) if c]
    # The pipeline on raw text scores what the run recorded (up to rows tied to rounding).
    served_accuracy = sum(s == row["label"] for s, row in zip(served, rows)) / len(rows)
    assert abs(served_accuracy - results["test_accuracy"]) <= clear.count(False) / len(rows) + 1e-9
    card = (output_dir / "README.md").read_text()
    assert "classifier_ngram_buckets" in card


@pytest.mark.slow
def test_the_ngram_score_refitted_with_the_validation_rows_is_what_the_test_rows_and_the_folder_get(tmp_path):
    # The score of token and character n-grams in one table: its fit, refit, folder and reloading.
    data_dir = tmp_path / "data"
    write_reviews(data_dir, 200, seed=1, name="train.jsonl")
    write_reviews(data_dir, 60, seed=3, name="validation.jsonl")
    write_reviews(data_dir, 40, seed=2, name="test.jsonl")
    for name in ("train.jsonl", "validation.jsonl"):  # a fifth of the labels wrong: no split is learnt perfectly
        path = data_dir / name
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows[::5]:
            row["label"] = {"negative": "positive", "positive": "negative"}[row["label"]]
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")

    def run(name, *extra):
        return load_script("train_classifier").main(
            ["--output_dir", str(tmp_path / name), *review_files(data_dir), *TINY_CLASSIFIER]
            + ["--validation_file", str(data_dir / "validation.jsonl"), "--max_steps", "10"]
            + ["--eval_strategy", "no", "--save_strategy", "no", "--ngram_buckets", "4096", "--ngram_order", "2"]
            + ["--ngram_unit", "token+character", "--tokenizer_model", "bpe", *extra]  # BPE: the same tokenizer twice
        )  # fmt: skip

    once, refitted = run("once"), run("refitted", "--ngram_refit_with_validation")
    assert "ngram_refit_samples" not in once and refitted["ngram_refit_samples"] == 260
    # The same training and first fit: the validation figures (scored before the refit) are the same.
    for key in ("eval_accuracy", "eval_loss", "eval_ngram_accuracy", "ngram_logit_scale"):
        assert refitted[key] == pytest.approx(once[key], rel=1e-5, abs=1e-6), key
    first = load_file(str(tmp_path / "once" / "model.safetensors"))
    saved = load_file(str(tmp_path / "refitted" / "model.safetensors"))
    assert torch.equal(saved["ngram_classifier.idf"], first["ngram_classifier.idf"])
    assert not torch.allclose(saved["ngram_classifier.weight"], first["ngram_classifier.weight"])
    # The folder holds the refitted score, and it is what scored the test rows.
    folder = tmp_path / "refitted"
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert model.config.classifier_ngram_unit == "token+character"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [json.loads(line) for line in (data_dir / "test.jsonl").read_text().splitlines()]
    with torch.no_grad():
        logits = model(**tokenizer([row["text"] for row in rows], return_tensors="pt", padding=True)).logits
    right = [model.config.id2label[p] == row["label"] for p, row in zip(logits.argmax(-1).tolist(), rows)]
    ties = int((~decided(logits)).sum())
    assert abs(sum(right) / len(rows) - refitted["test_accuracy"]) <= ties / len(rows) + 1e-9
    card = (folder / "README.md").read_text()
    assert "fitted once more on the training and validation rows together (260 rows)" in card


@pytest.mark.slow
def test_a_given_tokenizer_allowing_longer_inputs_is_saved_to_read_what_the_positions_hold(tmp_path):
    from transformers import pipeline

    from hf_transformer import Predictor
    from hf_transformer.tokenization import train_tokenizer

    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_reviews(data_dir, 200, seed=1, name="train.jsonl")
    write_reviews(data_dir, 20, seed=2, name="test.jsonl")
    texts = [json.loads(line)["text"] for line in (data_dir / "train.jsonl").read_text().splitlines()]
    given = train_tokenizer(texts, vocab_size=200, model_type="bpe", show_progress=False)  # reads 256 tokens
    given.save_pretrained(tmp_path / "tokenizer")
    arguments = ["--output_dir", str(output_dir), *review_files(data_dir), *TINY_CLASSIFIER]
    load_script("train_classifier").main(
        arguments + ["--tokenizer", str(tmp_path / "tokenizer"), "--max_steps", "2", "--save_strategy", "no"]
    )
    assert given.model_max_length > 32 and AutoTokenizer.from_pretrained(output_dir).model_max_length == 32
    # transformers' pipeline truncates at the saved tokenizer's limit, as the run did at its 32 positions.
    long_text = " ".join(texts[:12])
    assert len(given(long_text)["input_ids"]) > 32
    classify = pipeline("text-classification", model=str(output_dir), top_k=None)
    scores = {row["label"]: row["score"] for row in classify([long_text], truncation=True)[0]}
    expected = Predictor.from_pretrained(output_dir).classify([long_text])[0]
    assert scores[expected["label"]] == pytest.approx(expected["score"], abs=1e-5)


def test_a_refit_without_an_ngram_score_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="--ngram_refit_with_validation .* --ngram_buckets"):
        load_script("train_classifier").main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "absent.jsonl"), *TINY_CLASSIFIER]
            + ["--ngram_refit_with_validation"]
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ngram_unit", "character", "--ngram_token_order", "3"], "classifier_ngram_token_order"),
        (["--ngram_unit", "token+character", "--ngram_token_order", "0"], "classifier_ngram_token_order"),
        (["--ngram_order", "0"], "classifier_ngram_order"),
        (["--ngram_inverse_l2", "0"], "--ngram_inverse_l2 must be positive, got 0.0"),
        (["--ngram_inverse_l2", "-1"], "--ngram_inverse_l2 must be positive, got -1.0"),
    ],
)
def test_impossible_ngram_settings_are_refused_before_any_data_is_read(tmp_path, extra, message):
    # The training file does not exist: a refusal that came after reading it would be a FileNotFoundError.
    with pytest.raises(ValueError, match=message):
        load_script("train_classifier").main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "absent.jsonl"), *TINY_CLASSIFIER]
            + ["--ngram_buckets", "64", *extra]
        )


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        (["--num_heads", "3"], ValueError, r"`d_model` \(32\) must be divisible by `num_attention_heads` \(3\)"),
        (["--layer_norm_position", "Pre"], ValueError, "layer_norm_position"),
        (["--classifier_pooling", "avg"], ValueError, "classifier_pooling"),
        (["--init_from", "runs/no-such-pretraining"], FileNotFoundError, "--init_from runs/no-such-pretraining: no"),
        (["--tokenizer", "./no/such/tokenizer"], FileNotFoundError, "--tokenizer ./no/such/tokenizer: no such folder"),
        (["--max_eval_samples", "0"], ValueError, "--max_eval_samples is a number of rows, at least 1; got 0"),
        (["--validation_size", "1.5"], ValueError, "--validation_size is the share .* between 0 and 1; got 1.5"),
        (["--validation_size", "0"], ValueError, "--validation_size is the share .* between 0 and 1; got 0.0"),
        (
            ["--learning_rate", "-1", "--per_device_eval_batch_size", "0", "--adam_beta2", "1"],
            ValueError,
            r"impossible training numbers: --learning_rate -1.0 \(at least 0\); --adam_beta2 1.0 \(from 0 to below "
            r"1\); --per_device_eval_batch_size 0 \(at least 1\)",
        ),
        (["--tokenizer", str(Path(__file__).parent)], ValueError, "tests: the folder holds no tokenizer"),
        (["--init_from", str(Path(__file__).parent)], ValueError, "--init_from .*tests: the folder holds no tokenizer"),
    ],
)
def test_impossible_encoder_settings_and_missing_folders_are_refused_before_any_data_is_read(
    tmp_path, extra, error, message
):
    # The training file does not exist: a refusal after reading it would be a FileNotFoundError naming it.
    with pytest.raises(error, match=message):
        load_script("train_classifier").main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "absent.jsonl"), *TINY_CLASSIFIER, *extra]
        )


@pytest.mark.slow
def test_a_run_trained_in_bfloat16_records_the_figures_of_its_float32_folder(tmp_path):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    write_reviews(data_dir, 200, seed=1, name="train.jsonl")
    write_reviews(data_dir, 60, seed=2, name="test.jsonl")
    results = load_script("train_classifier").main(
        ["--output_dir", str(output_dir), *review_files(data_dir), *TINY_CLASSIFIER, "--bf16", "true"]
        + ["--max_steps", "30", "--eval_strategy", "no", "--save_strategy", "no"]
    )
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    rows = [json.loads(line) for line in (data_dir / "test.jsonl").read_text().splitlines()]
    labels = torch.tensor([model.config.label2id[row["label"]] for row in rows])
    batch = tokenizer([row["text"] for row in rows], return_tensors="pt", padding=True, truncation=True, max_length=32)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
    # Trained under bfloat16 autocast, scored in float32 as the saved folder computes: the two differ only in how the
    # batches are padded, far inside the tolerance; bfloat16's rounding of this model's logits moves the loss well
    # beyond it.
    assert results["test_loss"] == pytest.approx(loss.item(), rel=2e-6)


@pytest.mark.slow
def test_a_run_resumed_in_the_middle_of_a_pass_of_length_grouped_batches_trains_as_the_uninterrupted_one(tmp_path):
    # 180 rows in batches of 16: 12 steps a pass, so checkpoint-15 falls in the second pass. Resumed from it, the
    # run must go on in the order that pass began with (kept in the checkpoint), not a new one.
    from hf_transformer.trainer import PASS_ORDER_FILE
    from tests.helpers.launch import assert_resumed_run_trains_as_the_whole

    data_dir = tmp_path / "data"
    write_reviews(data_dir, 200, seed=1, name="train.jsonl")
    write_reviews(data_dir, 20, seed=2, name="test.jsonl")
    arguments = [*review_files(data_dir), *TINY_CLASSIFIER, "--per_device_train_batch_size", "16", "--max_steps", "30"]
    arguments += ["--validation_size", "0.1", "--train_sampling_strategy", "group_by_length", "--eval_strategy", "no"]
    arguments += ["--save_strategy", "steps", "--save_steps", "15", "--save_total_limit", "5", "--logging_steps", "1"]
    train_classifier = load_script("train_classifier")
    train_classifier.main(["--output_dir", str(tmp_path / "whole"), *arguments])
    assert (tmp_path / "whole" / "checkpoint-15" / PASS_ORDER_FILE).is_file()
    # the checkpoint's first 15 losses, then the 15 steps trained again: the same weights and losses
    assert (
        len(
            assert_resumed_run_trains_as_the_whole(
                train_classifier.main, arguments, tmp_path / "whole", "checkpoint-15"
            )
        )
        == 30
    )


@pytest.mark.slow
def test_a_resumed_run_s_card_gives_the_learning_rate_its_restored_schedule_trained_with(tmp_path):
    # The Trainer restores the checkpoint's schedule: a --learning_rate given to the resumed run does not train,
    # so the card must not state it.
    data_dir = tmp_path / "data"
    write_reviews(data_dir, 80, seed=1, name="train.jsonl")
    write_reviews(data_dir, 20, seed=2, name="test.jsonl")
    arguments = [*review_files(data_dir), *TINY_CLASSIFIER, "--eval_strategy", "no", "--save_strategy", "steps"]
    arguments += ["--save_steps", "3", "--max_steps", "6", "--logging_steps", "1", "--lr_scheduler_type", "constant"]
    train_classifier = load_script("train_classifier")
    train_classifier.main(["--output_dir", str(tmp_path / "first"), *arguments, "--learning_rate", "2e-3"])
    checkpoint = ["--resume_from_checkpoint", str(tmp_path / "first" / "checkpoint-3")]
    # Resumed with another model: another width fails inside torch's load_state_dict, other heads (the same shapes)
    # would train the checkpoint's weights as another model; both refused before training, the settings named.
    refused = {
        "--d_model 64": "d_model 32 there, 64 here; head_dim 16 there, 32 here",
        "--num_heads 4 --dropout 0.2": "classifier_dropout 0.1 there, 0.2 here; dropout 0.1 there, 0.2 here; head_dim "
        "16 there, 8 here; num_attention_heads 2 there, 4 here",
    }
    for other, named in refused.items():
        with pytest.raises(
            ValueError, match=re.escape(f"checkpoint-3: its model was built with other settings ({named})")
        ):
            train_classifier.main(["--output_dir", str(tmp_path / "other"), *arguments, *checkpoint, *other.split()])
    assert not (tmp_path / "other" / "model.safetensors").exists()
    # Another seed carves other validation rows out of the training file: the resumed part would train on rows the
    # first part scored as validation. Refused, as are other training rows (a shorter pass, or as many other rows),
    # another batch (the steps already taken would be counted in other rows) and another order of the rows.
    write_reviews(data_dir, 80, seed=7, name="other-train.jsonl")
    data_refused = {
        "--seed 43": "--seed 0 there, 43 here",
        "--max_train_samples 50": "training rows 72 there, 50 here",
        f"--train_file {data_dir / 'other-train.jsonl'}": "the training rows' tokens and labels (sha256) ",
        "--per_device_train_batch_size 16": "--per_device_train_batch_size 32 there, 16 here",
        "--gradient_accumulation_steps 2": "--gradient_accumulation_steps 1 there, 2 here",
        "--train_sampling_strategy group_by_length": "--train_sampling_strategy 'random' there, 'group_by_length' here",
    }
    for other, named in data_refused.items():
        with pytest.raises(ValueError, match=re.escape(f"checkpoint-3: its run read other rows or batches ({named}")):
            train_classifier.main(["--output_dir", str(tmp_path / "other"), *arguments, *checkpoint, *other.split()])
    # A tokenizer of the same size whose ids differ from the checkpoint's: the saved weights would read other ids.
    from hf_transformer.tokenization import train_tokenizer

    other_tokenizer = tmp_path / "other-tokenizer"
    texts = [json.loads(line)["text"] for line in (data_dir / "other-train.jsonl").read_text().splitlines()]
    train_tokenizer(texts, vocab_size=200, show_progress=False, save_directory=other_tokenizer)
    with pytest.raises(ValueError, match=re.escape(f"{other_tokenizer} is not the tokenizer of --resume_from_check")):
        train_classifier.main(["--output_dir", str(tmp_path / "other"), *arguments, *checkpoint]
                              + ["--tokenizer", str(other_tokenizer)])  # fmt: skip
    assert (tmp_path / "first" / "checkpoint-3" / "resume_settings.json").is_file()
    resumed = tmp_path / "resumed"
    train_classifier.main(  # the run's own tokenizer given again is the checkpoint's: taken
        ["--output_dir", str(resumed), *arguments, "--learning_rate", "5e-2", "--tokenizer", str(tmp_path / "first")]
        + ["--resume_from_checkpoint", str(tmp_path / "first" / "checkpoint-3")]
    )
    logged = {row["learning_rate"] for row in json.loads((resumed / "log_history.json").read_text()) if "loss" in row}
    assert logged == {0.002}
    assert card_settings((resumed / "README.md").read_text())["learning_rate"] == "0.002"
