"""scripts/train_translation.py, the general translation script, end to end on the user's own files: line-aligned
text files, or a table file with a source and a target column."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_transformer.metrics import bleu, chrf
from tests.helpers.launch import WORDS, load_script
from tests.helpers.models import check_card_describes_folder, trained_with

TINY_MODEL = [
    "--tokenizer_type", "bpe", "--vocab_size", "120",
    "--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "64",
    "--layer_norm_position", "pre", "--dropout", "0", "--max_source_length", "16", "--max_target_length", "16",
    "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--save_strategy", "no", "--seed", "1",
]  # fmt: skip


def toy_pairs(count: int, seed: int, words: int = 8) -> list[tuple[str, str]]:
    """English and a toy German that is its word-for-word image, from the first ``words`` words of each."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        positions = [rng.randrange(words) for _ in range(rng.randint(2, 4))]
        pairs.append((" ".join(WORDS["en"][p] for p in positions), " ".join(WORDS["de"][p] for p in positions)))
    return pairs


def write_text_pairs(folder, name: str, pairs) -> list[str]:
    """Two line-aligned files, ``name.en`` and ``name.de``."""
    files = [folder / f"{name}.{lang}" for lang in ("en", "de")]
    for index, path in enumerate(files):
        path.write_text("".join(f"{pair[index]}\n" for pair in pairs), encoding="utf-8")
    return [str(path) for path in files]


@pytest.mark.slow
def test_text_files_train_a_translator_scored_on_validation_and_test(tmp_path):
    splits = {"train": toy_pairs(200, 0), "valid": toy_pairs(24, 1), "test": toy_pairs(30, 2)}
    files = {name: write_text_pairs(tmp_path, name, pairs) for name, pairs in splits.items()}
    output_dir = tmp_path / "model"
    results = load_script("train_translation").main(
        [
            "--output_dir", str(output_dir), "--train_file", *files["train"], "--validation_file", *files["valid"],
            "--test_file", *files["test"], "--source_lang", "en", "--target_lang", "de", *TINY_MODEL,
            "--num_train_epochs", "2", "--per_device_train_batch_size", "16", "--learning_rate", "3e-3",
            "--warmup_steps", "5", "--eval_strategy", "epoch", "--num_beams", "2", "--length_penalty", "0.6", "1.0",
            "--per_device_eval_batch_size", "16", "--train_sampling_strategy", "group_by_length",
        ]
    )  # fmt: skip
    assert results["task"] == "translation_en_to_de" and results["train_samples"] == 200
    assert results["test_samples"] == 30 and results["eval_samples"] == 24
    assert results["bleu"] == results["test_bleu"] and results["chrf"] == results["test_chrf"] > 0
    assert "test_greedy_bleu" in results and "eval_greedy_bleu" in results
    assert set(results["eval_bleu_by_length_penalty"]) == {"0.6", "1.0"} and results["selected_on"] == "eval_bleu"
    assert results["command"].startswith("train_translation.py --output_dir")
    assert json.loads((output_dir / "results.json").read_text())["test_chrf"] == results["test_chrf"]
    history = json.loads((output_dir / "log_history.json").read_text())
    during_training = history[: next(i for i, entry in enumerate(history) if "train_runtime" in entry)]
    assert [entry["epoch"] for entry in during_training if "eval_bleu" in entry] == [1.0, 2.0]  # BLEU each epoch

    # The folder: the model with its chosen beam settings, its test output in file order (the scores are its own
    # against the test file's lines), a card.
    predictions = (output_dir / "test_predictions.txt").read_text(encoding="utf-8").splitlines()
    references = [target for _, target in splits["test"]]
    assert len(predictions) == 30
    assert bleu(predictions, references) == pytest.approx(results["test_bleu"])
    assert chrf(predictions, references) == pytest.approx(results["test_chrf"])
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    assert model.generation_config.num_beams == 2
    assert model.generation_config.length_penalty == results["length_penalty"]
    batch = tokenizer([source for source, _ in splits["test"][:3]], return_tensors="pt", padding=True)
    assert [text.strip() for text in tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)] == (
        predictions[:3]
    )
    card = check_card_describes_folder(output_dir, trained_with(output_dir))
    assert "pipeline_tag: translation" in card and "# Transformer en -> de" in card
    assert "on 200 training pairs of " in card and "one vocabulary trained on those pairs" in card
    assert "| tokenizer | BPE |" in card and "| max_position_embeddings | 16 |" in card
    assert f"| test (30 pairs) | {results['test_bleu']:.2f} |" in card and "among 0.6, 1.0" in card


@pytest.mark.slow
def test_a_table_file_without_validation_or_test_files_is_scored_on_held_out_pairs(tmp_path):
    rows = [{"en": source, "de": target, "id": i} for i, (source, target) in enumerate(toy_pairs(80, 0))]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output_dir = tmp_path / "model"
    output_dir.mkdir()  # an earlier run's test output in the folder: not this model's, so not left beside it
    (output_dir / "test_predictions.txt").write_text("an earlier model's translation\n", encoding="utf-8")
    results = load_script("train_translation").main(
        [
            "--output_dir", str(output_dir), "--train_file", str(tmp_path / "train.jsonl"), "--validation_size", "0.1",
            "--source_column", "en", "--target_column", "de",
            "--dataset_name", "toy", *TINY_MODEL, "--max_steps", "2", "--eval_strategy", "no", "--num_beams", "2",
        ]
    )  # fmt: skip
    assert results["task"] == "translation_en_to_de" and results["dataset"] == "toy"
    assert (results["train_samples"], results["eval_samples"]) == (72, 8)
    assert "eval_bleu" in results and "eval_greedy_bleu" in results and not any(k.startswith("test") for k in results)
    assert not (output_dir / "test_predictions.txt").exists() and (output_dir / "model.safetensors").is_file()
    card = check_card_describes_folder(output_dir, trained_with(output_dir))
    assert "datasets:\n- toy" in card and "| optimizer_steps | 2 |" in card


def test_splits_given_in_different_forms_are_refused(tmp_path):
    with pytest.raises(ValueError, match="every split as one table file or every split as two text files"):
        load_script("train_translation").main(
            ["--output_dir", str(tmp_path), "--train_file", "a.en", "a.de", "--validation_file", "v.jsonl"]
        )
    with pytest.raises(ValueError, match="--train_file is required"):
        load_script("train_translation").main(["--output_dir", str(tmp_path), "--validation_file", "v.jsonl"])
    # One file on both sides would train the model to copy its input.
    for split in ("train", "validation", "test"):
        files = {name: ["a.en", "a.de"] for name in ("train", "validation", "test")} | {split: ["a.en", "./a.en"]}
        argv = ["--output_dir", str(tmp_path)] + [arg for name in files for arg in (f"--{name}_file", *files[name])]
        with pytest.raises(ValueError, match=f"--{split}_file names one file, a.en, as both the source and the target"):
            load_script("train_translation").main(argv)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--num_beams", "0"], "--num_beams must be at least 1, got 0"),
        (["--generation_num_beams", "0"], "--generation_num_beams must be at least 1, got 0"),
        (["--num_heads", "3"], r"`d_model` \(32\) must be divisible by `num_attention_heads` \(3\)"),
        (["--layer_norm_position", "Pre"], "layer_norm_position"),
        (["--validation_size", "2"], "--validation_size is the share .* between 0 and 1; got 2.0"),
        (["--learning_rate", "-1"], r"impossible training numbers: --learning_rate -1.0 \(at least 0\)"),
        (["--tokenizer", str(Path(__file__).parent)], "tests: the folder holds no tokenizer"),
    ],
)
def test_impossible_settings_are_refused_before_the_data_is_read(tmp_path, given, message):
    # The files do not exist: a refusal after reading them would be a FileNotFoundError.
    with pytest.raises(ValueError, match=message):
        load_script("train_translation").main(
            ["--output_dir", str(tmp_path), "--train_file", "a.en", "a.de", *TINY_MODEL, *given]
        )
