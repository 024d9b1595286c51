"""The Multi30k recipe's training step (python -m recipes.multi30k.train), end to end on a generated toy language pair
in the Multi30k file layout."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_transformer.metrics import bleu, chrf
from recipes.multi30k import train as script
from recipes.multi30k.bleu import bleu_lc_tok
from tests.helpers.models import check_card_describes_folder, trained_with

SHARED_MULTI30K = Path(__file__).resolve().parents[4] / "shared" / "data" / "multi30k"

# A toy "German": every English word has one fixed translation, word order is kept.
LEXICON = {
    "the": "der",
    "man": "mann",
    "woman": "frau",
    "dog": "hund",
    "cat": "katze",
    "runs": "läuft",
    "sleeps": "schläft",
    "eats": "isst",
    "red": "rote",
    "small": "kleine",
    "big": "große",
    "child": "kind",
    "house": "haus",
    "near": "nahe",
    "green": "grüne",
    "sees": "sieht",
}


def toy_pairs(count: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(count):
        words = [rng.choice(list(LEXICON)) for _ in range(rng.randint(2, 5))]
        pairs.append((" ".join(words) + ".", " ".join(LEXICON[w] for w in words) + "."))
    return pairs


def write_multi30k(root: Path, seed: int = 0, sizes=(("train", 1200), ("val", 60), ("test_2016_flickr", 80))) -> dict:
    rng = random.Random(seed)
    folder = root / "multi30k"
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for stem, count in sizes:
        pairs = toy_pairs(count, rng)
        for index, lang in enumerate(("en", "de")):
            (folder / f"{stem}.{lang}").write_text("\n".join(p[index] for p in pairs) + "\n", encoding="utf-8")
        written[stem] = pairs
    return written


TINY_MODEL = [
    "--tokenizer_type", "bpe", "--vocab_size", "150",
    "--d_model", "64", "--num_layers", "2", "--num_heads", "4", "--intermediate_size", "128",
    "--layer_norm_position", "pre", "--dropout", "0", "--max_source_length", "16", "--max_target_length", "16",
    "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--save_strategy", "no",
]  # fmt: skip


@pytest.mark.slow
def test_train_translation_end_to_end(tmp_path):
    data_dir, output_dir = tmp_path / "data", tmp_path / "model"
    written = write_multi30k(data_dir)
    # Official-style lowercased tokenised references: the toy text is lowercase, so only its final period is split
    # off. Test's have their words reversed, which only a score read from these files can see.
    tok = data_dir / "multi30k" / "tok"
    tok.mkdir()
    for stem in ("val", "test_2016_flickr"):
        lines = [target.replace(".", " .") for _, target in written[stem]]
        if stem == "test_2016_flickr":
            lines = [" ".join(line.split()[::-1]) for line in lines]
        (tok / f"{stem}.lc.norm.tok.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    results = script.main(
        [
            "--output_dir", str(output_dir), "--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de",
            *TINY_MODEL,
            "--num_train_epochs", "9", "--per_device_train_batch_size", "16", "--learning_rate", "3e-3",
            "--warmup_steps", "40", "--eval_strategy", "steps", "--eval_steps", "250", "--logging_steps", "25",
            "--num_beams", "3", "--length_penalty", "0.5", "1.0", "--seed", "2",
            # Evaluation batches grouped by length come back out of dataset order: the scores must not care.
            "--train_sampling_strategy", "group_by_length", "--per_device_eval_batch_size", "8",
        ]
    )  # fmt: skip
    # The same model after one step scores BLEU 0 here (it generates nothing), after half the steps 0-30.
    assert results["test_bleu"] > 50 and results["test_greedy_bleu"] > 50 and results["eval_bleu"] > 50
    assert results["bleu"] == results["test_bleu"] and results["num_beams"] == 3
    # lc-tok BLEU is scored against the tok/ files, each row against its own line.
    assert results["eval_bleu_lc_tok"] == pytest.approx(results["eval_bleu"], abs=1e-6)
    assert results["bleu_lc_tok"] == results["test_bleu_lc_tok"] < results["test_bleu"] - 30
    # Each length penalty was tried on validation; the best one was used for test and saved.
    assert set(results["eval_bleu_by_length_penalty"]) == {"0.5", "1.0"}
    best = max(results["eval_bleu_by_length_penalty"].values())
    assert results["eval_bleu"] == best
    assert results["eval_bleu_by_length_penalty"][str(results["length_penalty"])] == best
    assert results["task"] == "translation_en_to_de" and results["split"] == "test2016"
    assert results["test_samples"] == 80 and results["eval_samples"] == 60
    assert results["parameters"] > 0 and results["wall_seconds"] > 0
    assert results["command"].startswith("recipes.multi30k.train --output_dir")

    saved = json.loads((output_dir / "results.json").read_text())
    assert saved["test_bleu"] == results["test_bleu"]
    history = json.loads((output_dir / "log_history.json").read_text())
    assert any("eval_bleu" in entry for entry in history) and any("loss" in entry for entry in history)
    card = check_card_describes_folder(output_dir, trained_with(output_dir))
    assert "pipeline_tag: translation" in card and "multi30k" in card and f"{results['test_bleu']:.2f}" in card
    assert "on 1,200 training pairs of Multi30k task 1 (en -> de)" in card and "| num_labels |" not in card

    # The predictions file follows the test file's line order.
    predictions = (output_dir / "test_predictions.txt").read_text(encoding="utf-8").splitlines()
    references = [target for _, target in written["test_2016_flickr"]]
    assert len(predictions) == len(references)
    assert np.mean([p == r for p, r in zip(predictions, references)]) > 0.5

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    assert model.config.label_smoothing == 0.1 and model.config.share_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.generation_config.num_beams == 3
    assert model.generation_config.length_penalty == results["length_penalty"]
    sources = [source for source, _ in written["test_2016_flickr"][:4]]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**batch)  # the saved generation config: beam 3, long enough for any target
    assert [text.strip() for text in tokenizer.batch_decode(output, skip_special_tokens=True)] == predictions[:4]


def test_paper_recipe_defaults():
    parser = script.argument_parser()
    model_args, data_args, args = parser.parse_args_into_dataclasses(args=["--output_dir", "unused", "--use_cpu"])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert args.lr_scheduler_type == "inverse_sqrt" and args.warmup_steps > 0
    assert args.predict_with_generate and model_args.label_smoothing == 0.1 and model_args.num_beams == 4
    assert model_args.share_embeddings and model_args.tie_word_embeddings and model_args.scale_embedding
    assert (data_args.source_lang, data_args.target_lang) == ("en", "de")

    class Tokenizer:  # what config() reads of a tokenizer
        pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

        def __len__(self):
            return 100

    assert model_args.config(Tokenizer()).init_method == "normal"
    xavier_args, _, _ = parser.parse_args_into_dataclasses(
        args=["--output_dir", "unused", "--use_cpu", "--init_method", "xavier_uniform"]
    )
    assert xavier_args.config(Tokenizer()).init_method == "xavier_uniform"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MULTI30K.is_dir(), reason="the shared Multi30k corpus is not present")
def test_real_multi30k_de_en_smoke(tmp_path):
    """A few steps on real Multi30k De->En: the pipeline runs and writes a sane results file."""
    results = script.main(
        [
            "--output_dir", str(tmp_path / "model"), "--data_dir", str(SHARED_MULTI30K.parent),
            "--source_lang", "de", "--target_lang", "en", *TINY_MODEL,
            "--vocab_size", "500", "--max_train_samples", "400", "--max_eval_samples", "16",
            "--max_test_samples", "16", "--max_steps", "5", "--eval_strategy", "no", "--num_beams", "2",
            "--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "2", "--average_checkpoints", "2",
            "--warmup_steps", "1", "--learning_rate", "1e-2",  # in 5 steps, an output that scores above 0
        ]
    )  # fmt: skip
    assert results["task"] == "translation_de_to_en" and results["test_samples"] == 16
    # The scores are those of the test output against the first 16 references (raw, and official tokenised).
    predictions = (tmp_path / "model" / "test_predictions.txt").read_text(encoding="utf-8").splitlines()
    references = (SHARED_MULTI30K / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:16]
    tokenized = (SHARED_MULTI30K / "tok" / "test_2016_flickr.lc.norm.tok.en").read_text(encoding="utf-8")
    assert len(predictions) == 16
    assert results["test_bleu"] == pytest.approx(bleu(predictions, references))
    assert results["test_chrf"] == pytest.approx(chrf(predictions, references))
    assert results["test_bleu"] > 0 and results["test_chrf"] > 0  # so that the equalities above tell scores apart
    assert results["test_bleu_lc_tok"] == pytest.approx(bleu_lc_tok(predictions, tokenized.splitlines()[:16], "en"))
    # The card counts the pairs limited by --max_train_samples.
    card = check_card_describes_folder(tmp_path / "model", trained_with(tmp_path / "model"))
    assert "on 400 training pairs of Multi30k task 1 (de -> en)" in card and "| test2016 (16 pairs) |" in card
    # Checkpoints at steps 2, 4 and 5, two kept: the saved model is the mean of the last two.
    assert results["averaged_checkpoints"] == ["checkpoint-4", "checkpoint-5"]
    from safetensors.torch import load_file

    folders = [tmp_path / "model", *(tmp_path / "model" / name for name in results["averaged_checkpoints"])]
    final, *last_two = (load_file(str(folder / "model.safetensors")) for folder in folders)
    assert max((last_two[0][name] - last_two[1][name]).abs().max() for name in final) > 1e-4  # steps 4 and 5 differ
    for name, tensor in final.items():
        torch.testing.assert_close(tensor, (last_two[0][name] + last_two[1][name]) / 2, rtol=0, atol=1e-6)


def test_averaging_more_checkpoints_than_kept_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--average_checkpoints 3 needs .* --save_total_limit >= 3 \\(now 2\\)"):
        script.main(
            ["--output_dir", str(tmp_path), "--use_cpu", "--average_checkpoints", "3", "--save_total_limit", "2"]
        )


def test_trainer_label_smoothing_is_refused_for_the_models_own(tmp_path):
    with pytest.raises(ValueError, match="use --label_smoothing .* not --label_smoothing_factor"):
        script.main(["--output_dir", str(tmp_path / "run"), "--use_cpu", "--label_smoothing_factor", "0.1"])
    assert not (tmp_path / "run").exists()


def test_a_missing_scorer_is_named_before_any_training(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "SCORERS", ("sacrebleu", "a_scorer_that_is_not_installed"))
    with pytest.raises(
        ImportError, match="needs a_scorer_that_is_not_installed: pip install 'hf_transformer\\[train\\]'"
    ):
        script.main(["--output_dir", str(tmp_path / "run"), "--use_cpu"])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_subword_dropout_trains_on_sampled_segmentations_and_saves_the_fixed_tokenizer(tmp_path, monkeypatch):
    from hf_transformer.data import SubwordSampledTranslation

    write_multi30k(tmp_path / "data", sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    trained_on = []

    class RecordingTrainer(script.RDropSeq2SeqTrainer):
        def train(self, *args, **kwargs):
            trained_on.append(self.train_dataset)
            return super().train(*args, **kwargs)

    monkeypatch.setattr(script, "RDropSeq2SeqTrainer", RecordingTrainer)
    output_dir = tmp_path / "model"
    script.main(
        [
            "--output_dir", str(output_dir), "--data_dir", str(tmp_path / "data"), *TINY_MODEL,
            "--subword_dropout", "0.2", "--max_steps", "2", "--eval_strategy", "no", "--num_beams", "1",
            "--train_sampling_strategy", "group_by_length",
        ]
    )  # fmt: skip
    (dataset,) = trained_on
    assert isinstance(dataset, SubwordSampledTranslation) and len(dataset) == 64
    assert dataset.tokenizer.backend_tokenizer.model.dropout == pytest.approx(0.2)
    saved = json.loads((output_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["model"]["type"] == "BPE" and saved["model"]["dropout"] is None  # inference segments as usual


def test_subword_dropout_with_a_unigram_tokenizer_is_refused_before_training(tmp_path):
    write_multi30k(tmp_path / "data", sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    arguments = [*TINY_MODEL, "--tokenizer_type", "unigram", "--subword_dropout", "0.1"]
    with pytest.raises(ValueError, match="subword dropout needs a fast BPE tokenizer"):
        script.main(["--output_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), *arguments])
    assert not (tmp_path / "model" / "model.safetensors").exists()


@pytest.mark.slow
def test_lowercase_model_is_chosen_on_lowercased_bleu_and_writes_lowercase(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    written = write_multi30k(data_dir, sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    for path in (data_dir / "multi30k").glob("*.*"):  # sentences start with a capital, as Multi30k's do
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join(line[:1].upper() + line[1:] for line in lines) + "\n", encoding="utf-8")
    tok = data_dir / "multi30k" / "tok"
    tok.mkdir()
    for stem in ("val", "test_2016_flickr"):
        lines = [target.replace(".", " .") for _, target in written[stem]]
        (tok / f"{stem}.lc.norm.tok.de").write_text("\n".join(lines) + "\n", encoding="utf-8")

    class RankingTrainer(script.RDropSeq2SeqTrainer):
        """Scores that rank the length penalties one way by cased BLEU and the other way by lc-tok BLEU."""

        def evaluate(self, *args, length_penalty=None, **kwargs):
            metrics = super().evaluate(
                *args, **kwargs, **({} if length_penalty is None else {"length_penalty": length_penalty})
            )
            if length_penalty is not None:
                metrics.update(eval_bleu=10 * length_penalty, eval_bleu_lc_tok=10 / length_penalty)
            return metrics

    monkeypatch.setattr(script, "RDropSeq2SeqTrainer", RankingTrainer)
    output_dir = tmp_path / "model"
    results = script.main(
        [
            "--output_dir", str(output_dir), "--data_dir", str(data_dir), *TINY_MODEL, "--lowercase", "true",
            "--max_steps", "2", "--eval_strategy", "no", "--num_beams", "2", "--length_penalty", "0.5", "1.0",
        ]
    )  # fmt: skip
    assert results["selected_on"] == "eval_bleu_lc_tok"
    assert results["eval_bleu_lc_tok_by_length_penalty"] == {"0.5": 20.0, "1.0": 10.0}
    assert results["length_penalty"] == 0.5
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert script.lowercases(tokenizer)
    assert tokenizer("Der Mann.")["input_ids"] == tokenizer("der mann.")["input_ids"]
    # Nothing it can write holds a capital, though every training sentence began with one.
    assert not any(char.isupper() for piece in tokenizer.get_vocab() if not piece.startswith("[") for char in piece)
    card = check_card_describes_folder(output_dir, trained_with(output_dir))
    assert "its tokenizer lowercases every text" in card and "| lowercase | true |" in card


def test_lowercase_with_a_tokenizer_that_keeps_case_is_refused_before_training(tmp_path):
    from hf_transformer.tokenization import train_tokenizer

    write_multi30k(tmp_path / "data", sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    cased = tmp_path / "cased"
    train_tokenizer(["Der Mann läuft.", "The man runs."] * 20, vocab_size=60, show_progress=False, save_directory=cased)
    arguments = [*TINY_MODEL, "--tokenizer", str(cased), "--lowercase", "true"]
    with pytest.raises(ValueError, match="--lowercase asks for a tokenizer that lowercases"):
        script.main(["--output_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), *arguments])
    assert not (tmp_path / "model" / "model.safetensors").exists()
    # The given tokenizer is loaded and checked before the pairs are read: refused the same without them.
    for name in ("train.en", "train.de"):
        (tmp_path / "data" / "multi30k" / name).unlink()
    with pytest.raises(ValueError, match="--lowercase asks for a tokenizer that lowercases"):
        script.main(["--output_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), *arguments])


@pytest.mark.slow
def test_bidirectional_epochs_draw_both_directions_then_the_model_s_own(tmp_path, monkeypatch):
    from hf_transformer.data import BidirectionalTranslation

    write_multi30k(tmp_path / "data", sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    draws = []  # (mixing, the row's source side is English) per draw, in order

    class RecordingPairs(BidirectionalTranslation):
        def __getitem__(self, index):
            row = super().__getitem__(index)
            english = self.forward[index]["input_ids"] == row["input_ids"]
            assert english or self.backward[index]["input_ids"] == row["input_ids"]
            draws.append((self.mixing, english))
            return row

    monkeypatch.setattr(script, "BidirectionalTranslation", RecordingPairs)
    script.main(
        [
            "--output_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), *TINY_MODEL,
            "--bidirectional_epochs", "2", "--num_train_epochs", "3", "--per_device_train_batch_size", "16",
            "--eval_strategy", "no", "--num_beams", "1", "--train_sampling_strategy", "group_by_length",
        ]
    )  # fmt: skip
    mixed = [english for mixing, english in draws if mixing]
    own = [english for mixing, english in draws if not mixing]
    # The length-grouped sampler reads every row once before the first epoch (the Trainer peeks at a row or two
    # besides); then two mixed epochs, and one of the model's own direction.
    assert 3 * 64 <= len(mixed) <= 3 * 64 + 4 and len(own) == 64
    assert all(own)
    assert 0.3 < sum(mixed) / len(mixed) < 0.7  # each draw is one direction or the other, about half each
    assert draws[-64:] == [(False, True)] * 64  # the last epoch trains the model's own direction only


@pytest.mark.slow
def test_a_bidirectional_run_resumed_in_the_middle_of_a_mixed_epoch_trains_as_the_uninterrupted_one(tmp_path):
    # 64 pairs in batches of 16: 4 steps an epoch, so checkpoint-6 falls in the second epoch, which still draws
    # both directions. Resumed from it, the run must draw the directions that epoch drew in the uninterrupted run.
    from tests.helpers.launch import assert_resumed_run_trains_as_the_whole

    write_multi30k(tmp_path / "data", sizes=(("train", 64), ("val", 8), ("test_2016_flickr", 8)))
    arguments = ["--data_dir", str(tmp_path / "data"), *TINY_MODEL, "--dropout", "0.1"]
    arguments += ["--bidirectional_epochs", "2", "--num_train_epochs", "3", "--per_device_train_batch_size", "16"]
    arguments += ["--eval_strategy", "no", "--num_beams", "1", "--train_sampling_strategy", "group_by_length"]
    arguments += ["--save_strategy", "steps", "--save_steps", "6", "--logging_steps", "1"]
    script.main(["--output_dir", str(tmp_path / "whole"), *arguments])
    losses = assert_resumed_run_trains_as_the_whole(script.main, arguments, tmp_path / "whole", "checkpoint-6")
    assert len(losses) == 12


def test_bidirectional_pairs_draw_their_directions_from_the_seed_and_the_epoch_alone():
    from hf_transformer.data import BidirectionalTranslation

    forward = [{"input_ids": [index + 2, 1]} for index in range(400)]
    backward = [{"input_ids": [1, index + 2]} for index in range(400)]

    def directions(pairs, order):
        return {index: pairs[index]["input_ids"][0] == 1 for index in order}

    pairs = BidirectionalTranslation(forward, backward, seed=7)
    first = directions(pairs, range(400))
    assert 150 < sum(first.values()) < 250  # about half the rows reversed
    torch.manual_seed(0)  # the global random state, and the order rows are read in, change nothing
    assert directions(pairs, reversed(range(400))) == first
    assert directions(BidirectionalTranslation(forward, backward, seed=7), range(400)) == first
    pairs.epoch = 1
    second = directions(pairs, range(400))
    assert second != first and 150 < sum(second.values()) < 250
    pairs.epoch = 0
    assert directions(pairs, range(400)) == first
    assert directions(BidirectionalTranslation(forward, backward, seed=8), range(400)) != first
    pairs.mixing = False
    assert not any(directions(pairs, range(400)).values())
    with pytest.raises(ValueError, match="seed must be an integer of 0 or more, got -1"):
        BidirectionalTranslation(forward, backward, seed=-1)


def test_bidirectional_epochs_callback_follows_the_epoch_a_resumed_run_is_in():
    from types import SimpleNamespace

    from hf_transformer.training import BidirectionalEpochs

    dataset = SimpleNamespace(mixing=True)
    callback = BidirectionalEpochs(dataset, 3)
    for epoch, starting, mixing in [
        (None, 0, True),
        (0.0, 0, True),
        (2.0, 2, True),
        (2.5, 2, True),
        (2.9999999, 3, False),
        (3.0, 3, False),
        (5.5, 5, False),
    ]:
        callback.on_epoch_begin(None, SimpleNamespace(epoch=epoch, is_world_process_zero=True), None)
        assert (dataset.epoch, dataset.mixing) == (starting, mixing), epoch
    # A run resumed in the middle of a mixed epoch mixes again, with that epoch's directions.
    callback.on_epoch_begin(None, SimpleNamespace(epoch=1.5, is_world_process_zero=True), None)
    assert (dataset.epoch, dataset.mixing) == (1, True)
    with pytest.raises(ValueError, match="--bidirectional_epochs must be 0 or more"):
        BidirectionalEpochs(dataset, -1)


@pytest.mark.parametrize("epochs", ["3", "-1"])
def test_bidirectional_epochs_must_leave_epochs_of_the_model_s_own_direction(tmp_path, epochs):
    with pytest.raises(ValueError, match=f"--bidirectional_epochs {epochs} must be 0 \\(off\\) or fewer than"):
        script.main(
            ["--output_dir", str(tmp_path / "run"), "--use_cpu", "--num_train_epochs", "3",
             "--bidirectional_epochs", epochs]
        )  # fmt: skip
    assert not (tmp_path / "run").exists()
