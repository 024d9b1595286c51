"""The Multi30k recipe's scoring of saved models (python -m recipes.multi30k.evaluate): a run scored again as its
training scored it, and runs of one tokenizer decoded as one ensemble."""

import json

import pytest
from test_multi30k_train import TINY_MODEL, write_multi30k

from recipes.multi30k import evaluate as evaluate_step
from recipes.multi30k import train

pytestmark = pytest.mark.slow


def train_tiny(data_dir, output_dir, seed: int, *extra: str) -> dict:
    return train.main(
        [
            "--output_dir", str(output_dir), "--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de",
            *TINY_MODEL, "--num_train_epochs", "9", "--per_device_train_batch_size", "16", "--learning_rate", "3e-3",
            "--warmup_steps", "40", "--eval_strategy", "no", "--num_beams", "3", "--length_penalty", "0.5", "1.0",
            "--per_device_eval_batch_size", "16", "--train_sampling_strategy", "group_by_length", "--seed", str(seed),
            *extra,
        ]
    )  # fmt: skip


def test_evaluate_rescores_a_run_and_ensembles_runs_of_one_tokenizer(tmp_path):
    data_dir = tmp_path / "data"
    write_multi30k(data_dir, sizes=(("train", 1200), ("val", 40), ("test_2016_flickr", 50)))
    first = train_tiny(data_dir, tmp_path / "a", 2)
    train_tiny(data_dir, tmp_path / "b", 3, "--tokenizer", str(tmp_path / "a"))
    evaluate = evaluate_step.main
    common = ["--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de", "--num_beams", "3",
              "--length_penalty", "0.5", "1.0", "--per_device_eval_batch_size", "16"]  # fmt: skip

    # One folder: the training run's own scores, decoded the same way.
    alone = evaluate(["--model_dirs", str(tmp_path / "a"), "--output_dir", str(tmp_path / "a-again"), *common])
    for key in ("eval_bleu", "length_penalty", "test_bleu", "test_greedy_bleu"):
        assert alone[key] == pytest.approx(first[key], abs=1e-6), key

    both = evaluate(["--model_dirs", str(tmp_path / "a"), str(tmp_path / "b"), "--output_dir", str(tmp_path / "ab"),
                     *common])  # fmt: skip
    assert [member["folder"] for member in both["ensemble"]] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert both["ensemble"][0]["bleu"] == first["bleu"]
    assert first["test_bleu"] > 25  # each member translates the toy language, and so does the ensemble
    assert both["bleu"] == both["test_bleu"] > 25 and both["test_samples"] == 50
    saved = json.loads((tmp_path / "ab" / "results.json").read_text())
    assert saved["test_bleu"] == both["test_bleu"] and saved["parameters"] == 2 * first["parameters"]
    assert len((tmp_path / "ab" / "test_predictions.txt").read_text(encoding="utf-8").splitlines()) == 50


def test_evaluate_refuses_folders_with_different_tokenizers(tmp_path):
    data_dir = tmp_path / "data"
    write_multi30k(data_dir, sizes=(("train", 300), ("val", 10), ("test_2016_flickr", 10)))
    train_tiny(data_dir, tmp_path / "a", 1, "--num_train_epochs", "1")
    train_tiny(data_dir, tmp_path / "b", 1, "--num_train_epochs", "1", "--vocab_size", "100")
    with pytest.raises(ValueError, match="must share one vocabulary"):
        evaluate_step.main(
            ["--model_dirs", str(tmp_path / "a"), str(tmp_path / "b"), "--output_dir", str(tmp_path / "ab"),
             "--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de"]
        )  # fmt: skip


def test_evaluate_refuses_to_write_over_a_model_folder_s_own_results(tmp_path):
    # Refused as the arguments parse: nothing is read, and the training run's results.json stays its own.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text('{"bleu": 40.0}')
    with pytest.raises(ValueError, match="--output_dir .* is one of the --model_dirs"):
        evaluate_step.main(["--model_dirs", str(tmp_path / "run"), "--output_dir", str(tmp_path / "run" / ".")])
    assert json.loads((tmp_path / "run" / "results.json").read_text()) == {"bleu": 40.0}


def test_evaluate_refuses_to_write_into_another_model_s_folder(tmp_path):
    # Not one of --model_dirs, but a training run's folder all the same: its results.json stays its own.
    for name in ("run", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    (tmp_path / "other" / "results.json").write_text('{"bleu": 40.0}')
    with pytest.raises(ValueError, match="--output_dir .*other holds a model"):
        evaluate_step.main(["--model_dirs", str(tmp_path / "run"), "--output_dir", str(tmp_path / "other")])
    assert json.loads((tmp_path / "other" / "results.json").read_text()) == {"bleu": 40.0}


def test_evaluate_refuses_to_write_over_an_earlier_evaluation_s_results(tmp_path):
    # An earlier ensemble's scores (no model there): written over, they were lost.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    (tmp_path / "ensemble").mkdir()
    (tmp_path / "ensemble" / "results.json").write_text('{"bleu": 41.0}')
    with pytest.raises(ValueError, match="--output_dir .*ensemble holds an earlier run's results.json"):
        evaluate_step.main(["--model_dirs", str(tmp_path / "run"), "--output_dir", str(tmp_path / "ensemble")])
    assert json.loads((tmp_path / "ensemble" / "results.json").read_text()) == {"bleu": 41.0}


def test_evaluate_refuses_a_model_of_the_other_direction_before_reading_it(tmp_path):
    # A De->En run scored with the default En->De arguments would read English sources as German: a silent 2 BLEU.
    (tmp_path / "de-en").mkdir()
    (tmp_path / "de-en" / "results.json").write_text('{"source_lang": "de", "target_lang": "en"}')
    with pytest.raises(
        ValueError, match="--model_dirs .*de-en translates de -> en \\(its results.json\\), not en -> de"
    ):
        evaluate_step.main(["--model_dirs", str(tmp_path / "de-en"), "--output_dir", str(tmp_path / "scored")])
    assert not (tmp_path / "scored").exists()


def test_evaluate_exports_refuses_what_it_cannot_score_before_any_work(tmp_path, capsys):
    """A classifier's folder (it was loaded as a translator and failed deep inside), counts below 1 (0 sentences read
    as all of them), and an --output whose Markdown table would be written over it: one line each."""
    from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification
    from recipes.multi30k import evaluate_exports
    from tests.helpers.models import sentence_tokenizer, tiny_config

    classifier, translator = tmp_path / "classifier", tmp_path / "translator"
    TransformerForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(classifier)
    TransformerForConditionalGeneration(tiny_config()).save_pretrained(translator)
    cases = {
        "classifier": ([str(classifier)], "serves translation (seq2seq)"),
        "no tokenizer": ([str(translator)], "tokenizer"),
    }
    for name, (argv, told) in cases.items():
        with pytest.raises(SystemExit):
            evaluate_exports.main([*argv, "--source_lang", "en", "--target_lang", "de"])
        assert told in capsys.readouterr().err, name
    sentence_tokenizer().save_pretrained(translator)
    for extra, told in ((["--max_samples", "0"], "--max_samples 0: give 1 or more"),
                        (["--output", str(tmp_path / "table.md")], "give the JSON file")):  # fmt: skip
        with pytest.raises(SystemExit):
            evaluate_exports.main([str(translator), "--source_lang", "en", "--target_lang", "de", *extra])
        assert told in capsys.readouterr().err
    assert not (tmp_path / "table.md").exists()
