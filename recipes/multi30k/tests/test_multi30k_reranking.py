"""Noisy-channel reranking (recipes.multi30k.reranking) and the step that runs it on Multi30k
(python -m recipes.multi30k.rerank)."""

from __future__ import annotations

import json

import pytest
import torch
from test_multi30k_train import TINY_MODEL, write_multi30k

from hf_transformer import Predictor, TransformerForConditionalGeneration
from hf_transformer.metrics import bleu
from recipes.multi30k import rerank as rerank_step
from recipes.multi30k import train as train_step
from recipes.multi30k.reranking import (
    SequenceScores,
    candidates,
    choose_weights,
    mbr_utilities,
    rerank,
    sequence_log_probs,
)
from tests.helpers.models import SENTENCES, record_calls, save_random_translator, sentence_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return sentence_tokenizer()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tokenizer):
    """A random model, pre-LN with large weights so that its beam candidates differ, saved with the tokenizer."""
    return save_random_translator(
        tmp_path_factory.mktemp("model"), tokenizer, max_position_embeddings=16, max_new_tokens=6
    )


def test_sequence_log_probs_are_the_models_own_loss_summed_whatever_the_batching(folder, tokenizer):
    model = TransformerForConditionalGeneration.from_pretrained(folder).eval()
    sources, targets = SENTENCES[:7], SENTENCES[7:14][::-1]  # lengths differ: the batches are padded
    expected, expected_lengths = [], []
    for source, target in zip(sources, targets):
        ids = tokenizer([source], return_tensors="pt")["input_ids"]
        labels = tokenizer(text_target=[target], return_tensors="pt")["input_ids"][:, :16]  # the position table
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss  # mean cross-entropy, no label smoothing
        expected.append(-loss.item() * labels.shape[1])
        expected_lengths.append(labels.shape[1])
    assert labels[0, -1] == tokenizer.eos_token_id  # the end token is scored
    predictor = Predictor.from_pretrained(folder)
    for batch_size in (1, 3, 64):
        scores = sequence_log_probs(predictor, sources, targets, batch_size=batch_size)
        assert scores.lengths == expected_lengths
        assert scores.log_probs == pytest.approx(expected, rel=1e-4, abs=1e-4)
    # An ensemble of two copies of the model gives the model's probabilities.
    ensemble = Predictor.from_pretrained([folder, folder])
    assert sequence_log_probs(ensemble, sources, targets).log_probs == pytest.approx(expected, rel=1e-4, abs=1e-4)
    with pytest.raises(ValueError, match="7 sources but 6 targets"):
        sequence_log_probs(predictor, sources, targets[:6])


def test_ctranslate2_scores_and_candidates_are_the_models(folder, tokenizer):
    """engine="ctranslate2" (the folder converted on loading): the same teacher-forced scores as torch's, to rounding,
    and n-best lists whose first candidates are its own beam search's; an ensemble of folders stays torch's."""
    pytest.importorskip("ctranslate2")
    sources, targets = SENTENCES[:7], SENTENCES[7:14][::-1]
    torch_scores = sequence_log_probs(Predictor.from_pretrained(folder), sources, targets)
    engine = Predictor.from_pretrained(folder, engine="ctranslate2", batch_size=3)
    scores = sequence_log_probs(engine, sources, targets)
    assert scores.lengths == torch_scores.lengths
    assert scores.log_probs == pytest.approx(torch_scores.log_probs, rel=1e-4, abs=1e-4)
    assert len(set(scores.log_probs)) == len(sources)  # a scorer that ignores its inputs would not pass
    nbest = candidates(engine, sources, 3)
    assert [row[0] for row in nbest] == engine.translate(sources, num_beams=3)
    assert sum(map(len, nbest)) > len(sources)
    with pytest.raises(ValueError, match="engine 'ctranslate2' decodes one model; an ensemble of 2 folders"):
        rerank_step.load([str(folder), str(folder)], 4, "cpu", "ctranslate2")


def test_candidates_are_beam_searchs_distinct_outputs_best_first(folder, monkeypatch):
    predictor = Predictor.from_pretrained(folder, batch_size=4)
    sources = SENTENCES[:9]
    nbest = candidates(predictor, sources, 4)
    assert [row[0] for row in nbest] == predictor.translate(sources, num_beams=4)
    assert all(1 <= len(row) <= 4 and len(set(row)) == len(row) for row in nbest)
    assert sum(map(len, nbest)) > 2 * len(sources)  # the random model's beams do differ
    with pytest.raises(ValueError, match="num_beams=2 < 4 candidates"):
        candidates(predictor, sources, 4, num_beams=2)
    # Two token sequences that read the same are one candidate.
    outputs = [{"text": "x", "translation": "a b", "translations": ["a b", "c", "a b"]}]
    monkeypatch.setattr(Predictor, "__call__", lambda self, texts, **options: outputs)
    assert candidates(predictor, ["x"], 3) == [["a b", "c"]]


def test_rerank_weighs_the_channel_and_the_length():
    nbest = [["keeps the source", "drops it"], ["short", "a longer one"]]
    forward = SequenceScores(log_probs=[-2.0, -1.0, -2.0, -4.0], lengths=[2, 2, 1, 4])
    channel = SequenceScores(log_probs=[-1.0, -9.0, -3.0, -3.0], lengths=[3, 3, 3, 3])
    # The forward model alone, summed: the second of the first pair, the short one of the second.
    assert rerank(nbest, forward, channel, channel_weight=0.0, length_exponent=0.0) == ["drops it", "short"]
    # The channel outweighs the forward model's preference: (-2 - 1) / 2 > (-1 - 9) / 2.
    assert rerank(nbest, forward, channel, channel_weight=1.0, length_exponent=1.0)[0] == "keeps the source"
    # Dividing by the length favours the longer candidate: -4 / 4 > -2 / 1.
    assert rerank(nbest, forward, channel, channel_weight=0.0, length_exponent=1.0)[1] == "a longer one"
    with pytest.raises(ValueError, match="4 candidates but 3 forward"):
        rerank(nbest, SequenceScores([-1.0] * 3, [1] * 3), channel, channel_weight=0.5)


def test_choose_weights_takes_the_best_setting_of_the_grid():
    nbest = [["x", "y"]]
    forward = SequenceScores([-1.0, -2.0], [1, 1])
    channel = SequenceScores([-5.0, -1.0], [1, 1])
    chosen, grid = choose_weights(
        nbest, forward, channel, lambda outputs: 1.0 if outputs == ["y"] else 0.0,
        channel_weights=[0.0, 0.2, 0.5], length_exponents=[1.0],
    )  # fmt: skip
    # With weight 0.2, x scores -2.0 and y -2.2: only 0.5 (x -3.5, y -2.5) turns to y.
    assert grid == {"0/1": 0.0, "0.2/1": 0.0, "0.5/1": 1.0}
    assert chosen == {"channel_weight": 0.5, "length_exponent": 1.0, "mbr_scale": None}
    # MBR settings join the grid, one per channel weight and scale; they need the utilities.
    utilities = [[[100.0, 0.0], [0.0, 100.0]]]
    chosen, grid = choose_weights(
        nbest, forward, channel, lambda outputs: 1.0 if outputs == ["y"] else 0.0,
        channel_weights=[0.0], length_exponents=[1.0], mbr_scales=[1.0], utilities=utilities,
    )  # fmt: skip
    assert grid == {"0/1": 0.0, "0/mbr1": 0.0}  # x: the more likely, and each candidate agrees only with itself
    assert chosen == {"channel_weight": 0.0, "length_exponent": 1.0, "mbr_scale": None}  # ties: the first listed
    with pytest.raises(ValueError, match="needs the n-best's utilities"):
        choose_weights(nbest, forward, channel, len, channel_weights=[0.0], length_exponents=[1.0], mbr_scales=[1.0])


def test_mbr_utilities_are_sentence_bleu_of_each_pair():
    from sacrebleu.metrics import BLEU

    nbest = [["a man rides a horse .", "a man is riding a horse .", "two dogs play ."], ["one"]]
    utilities = mbr_utilities(nbest)
    assert [len(row) for row in utilities] == [3, 1] and all(len(u) == 3 for u in utilities[0])
    assert [utilities[0][i][i] for i in range(3)] == [100.0] * 3 and utilities[1] == [[100.0]]
    metric = BLEU(effective_order=True)
    assert utilities[0][0][1] == metric.sentence_score(nbest[0][0], [nbest[0][1]]).score  # hypothesis 0, reference 1
    assert utilities[0][1][0] != utilities[0][0][1]  # not symmetric: the brevity penalty sides with the reference
    assert utilities[0][2][0] < 10  # unrelated sentences barely agree


def test_mbr_prefers_the_candidate_the_others_agree_with():
    nbest = [["a dog runs on the grass", "a dog runs on grass", "a dog is running on the grass", "cats sleep"]]
    utilities = mbr_utilities(nbest)
    # "cats sleep" is the most likely candidate by a small margin; the three that agree share the rest.
    forward = SequenceScores([-1.0, -1.2, -1.3, -0.9], [6, 5, 7, 2])
    channel = SequenceScores([-5.0] * 4, [4] * 4)
    argmax = rerank(nbest, forward, channel, channel_weight=0.0, length_exponent=0.0)
    assert argmax == ["cats sleep"]
    assert rerank(nbest, forward, channel, channel_weight=0.0, mbr_scale=1.0, utilities=utilities) == [
        "a dog runs on the grass"  # closest to both other dog sentences
    ]
    # A sharp posterior is the argmax again; a flat one (scale 0) is consensus alone.
    assert rerank(nbest, forward, channel, channel_weight=0.0, mbr_scale=100.0, utilities=utilities) == argmax
    assert rerank(nbest, forward, channel, channel_weight=0.0, mbr_scale=0.0, utilities=utilities) == [
        "a dog runs on the grass"
    ]
    # The channel weight enters the posterior: a channel that rejects the outlier hard leaves it no weight.
    channel_against = SequenceScores([-5.0, -5.0, -5.0, -50.0], [4] * 4)
    for weight, expected in ((0.0, "cats sleep"), (1.0, "a dog runs on the grass")):
        chosen = rerank(nbest, forward, channel_against, channel_weight=weight, mbr_scale=100.0, utilities=utilities)
        assert chosen == [expected]
    with pytest.raises(ValueError, match="mbr_scale must be 0 or more"):
        rerank(nbest, forward, channel, channel_weight=0.0, mbr_scale=-1.0, utilities=utilities)
    with pytest.raises(ValueError, match="needs the n-best's utilities"):
        rerank(nbest, forward, channel, channel_weight=0.0, mbr_scale=1.0, utilities=utilities + utilities)
    with pytest.raises(ValueError, match="needs a length_exponent"):
        rerank(nbest, forward, channel, channel_weight=0.0, length_exponent=None)


def _ensemble_folder(path, members: list[str], length_penalty: float):
    """A folder as recipes.multi30k.evaluate leaves an ensemble's scores: results.json, no model."""
    path.mkdir(parents=True, exist_ok=True)
    scored = {"ensemble": [{"folder": member, "bleu": 30.0} for member in members], "length_penalty": length_penalty}
    (path / "results.json").write_text(json.dumps(scored))
    return path


def test_an_ensemble_folder_stands_for_its_members_and_its_length_penalty(tmp_path):
    model_folders = rerank_step.model_folders
    for name in ("model", "ensemble/member-43"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "config.json").write_text("{}")
    # A member scored elsewhere and moved since with its ensemble's folder is found inside that folder.
    ensemble = _ensemble_folder(tmp_path / "ensemble", [str(tmp_path / "model"), "gone/member-43"], 1.4)
    assert model_folders([str(ensemble)]) == ([str(tmp_path / "model"), str(ensemble / "member-43")], 1.4)
    # Model folders, and a training run's folder without config.json (an adapter's), are passed on as given.
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "results.json").write_text(json.dumps({"bleu": 30.0}))
    assert model_folders([str(tmp_path / "model"), str(adapter)]) == ([str(tmp_path / "model"), str(adapter)], None)
    missing = _ensemble_folder(tmp_path / "missing", ["nowhere/member-44"], 1.0)
    with pytest.raises(FileNotFoundError, match="member nowhere/member-44 not found"):
        model_folders([str(missing)])


def train_tiny(data_dir, output_dir, source: str, target: str, seed: int) -> dict:
    return train_step.main(
        [
            "--output_dir", str(output_dir), "--data_dir", str(data_dir), "--source_lang", source,
            "--target_lang", target, *TINY_MODEL, "--num_train_epochs", "6", "--per_device_train_batch_size", "16",
            "--learning_rate", "3e-3", "--warmup_steps", "40", "--eval_strategy", "no", "--num_beams", "3",
            "--length_penalty", "1.0", "--per_device_eval_batch_size", "16", "--seed", str(seed),
        ]
    )  # fmt: skip


@pytest.mark.slow
def test_rerank_chooses_on_validation_and_scores_test_once(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    written = write_multi30k(data_dir, sizes=(("train", 1000), ("val", 30), ("test_2016_flickr", 40)))
    train_tiny(data_dir, tmp_path / "en-de", "en", "de", 2)
    train_tiny(data_dir, tmp_path / "de-en", "de", "en", 3)
    results = rerank_step.main(
        [
            "--model_dirs", str(tmp_path / "en-de"), "--channel_model_dirs", str(tmp_path / "de-en"),
            "--output_dir", str(tmp_path / "reranked"), "--data_dir", str(data_dir), "--source_lang", "en",
            "--target_lang", "de", "--num_candidates", "3", "--channel_weights", "0", "1",
            "--length_exponents", "0.5", "1",
        ]
    )  # fmt: skip
    grid = results["eval_bleu_by_setting"]
    assert set(grid) == {"0/0.5", "0/1", "1/0.5", "1/1"}
    chosen = f"{results['channel_weight']:g}/{results['length_exponent']:g}"
    assert grid[chosen] == max(grid.values()) == results["eval_bleu"]  # chosen on validation
    assert results["length_penalty"] == 1.0  # the forward folder's own, as training chose it
    assert 1 < results["test_candidates_per_sentence"] <= 3
    assert results["bleu"] == results["test_bleu"] > 25  # the toy language is translated
    saved = json.loads((tmp_path / "reranked" / "results.json").read_text())
    assert saved["test_bleu"] == results["test_bleu"] and saved["test_beam_bleu"] == results["test_beam_bleu"]
    forward = json.loads((tmp_path / "en-de" / "results.json").read_text())
    assert saved["parameters"] == 2 * forward["parameters"]  # the system is both models (of one shape here)
    lines = (tmp_path / "reranked" / "test_predictions.txt").read_text(encoding="utf-8").splitlines()
    references = [pair[1] for pair in written["test_2016_flickr"]]
    assert len(lines) == 40 and bleu(lines, references) == pytest.approx(results["test_bleu"])

    # The n-best lists and their scores are kept: choosing again from them, MBR included, decodes nothing, and the
    # settings both runs share score as before.
    runs = iter(range(100))

    def choose_again(*options: str) -> dict:  # each into a folder of its own (an earlier run's is refused)
        return rerank_step.main(
            [
                "--model_dirs", str(tmp_path / "en-de"), "--channel_model_dirs", str(tmp_path / "de-en"),
                "--output_dir", str(tmp_path / f"again-{next(runs)}"), "--data_dir", str(data_dir),
                "--source_lang", "en", "--target_lang", "de", "--channel_weights", "0", "1",
                "--length_exponents", "0.5", "1", "--candidates_from", str(tmp_path / "reranked"), *options,
            ]
        )  # fmt: skip

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(rerank_step, "candidates", no_decoding)
    again = choose_again("--num_candidates", "3", "--mbr_scales", "0.5", "1")
    with pytest.raises(ValueError, match="num_candidates 3 there, 4 here"):
        choose_again("--num_candidates", "4")
    kept = tmp_path / "reranked" / "candidates.json"
    # The models' weights are part of what decoded the lists: one trained again into its folder decodes others.
    assert again["weights_sha256"] == [rerank_step.weights_sha256(tmp_path / run) for run in ("en-de", "de-en")]
    saved_lists = json.loads(kept.read_text())
    kept.write_text(json.dumps(saved_lists | {"weights_sha256": ["0" * 64, saved_lists["weights_sha256"][1]]}))
    with pytest.raises(ValueError, match="weights_sha256"):
        choose_again("--num_candidates", "3")
    saved_lists["splits"]["test"]["sources"][0] = "another sentence"
    kept.write_text(json.dumps(saved_lists))
    with pytest.raises(ValueError, match="not those of these 40 test sentences"):
        choose_again("--num_candidates", "3")
    # Refused before any model is read: a model of the other direction (as forward or as channel), a classifier as
    # the channel (it loaded, and failed only once the n-best lists were decoded), an output folder that is a
    # model's own, a negative grid value.
    from hf_transformer import TransformerForSequenceClassification
    from tests.helpers.models import tiny_config

    TransformerForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path / "classifier")
    refused = [
        (["--channel_model_dirs", str(tmp_path / "classifier")], "serves translation \\(seq2seq\\)"),
        (["--model_dirs", str(tmp_path / "de-en")], "--model_dirs .*de-en translates de -> en .*not en -> de"),
        (
            ["--channel_model_dirs", str(tmp_path / "en-de")],
            "--channel_model_dirs .*translates en -> de .*not de -> en",
        ),
        (["--output_dir", str(tmp_path / "en-de")], "--output_dir .* is one of the --model_dirs"),
        (["--output_dir", str(tmp_path / "de-en")], "--output_dir .* is one of the --channel_model_dirs"),
        (["--mbr_scales", "-1"], "--mbr_scales must be 0 or more"),
    ]
    for options, message in refused:
        arguments = {
            "--model_dirs": str(tmp_path / "en-de"),
            "--channel_model_dirs": str(tmp_path / "de-en"),
            "--output_dir": str(tmp_path / "refused"),
        }
        arguments |= dict(zip(options[::2], options[1::2]))
        with pytest.raises(ValueError, match=message):
            rerank_step.main(
                [*[item for pair in arguments.items() for item in pair], "--data_dir", str(data_dir)]
                + ["--source_lang", "en", "--target_lang", "de", "--num_candidates", "3"]
            )
    assert not (tmp_path / "refused").exists()
    assert set(again["eval_bleu_by_setting"]) == set(grid) | {"0/mbr0.5", "0/mbr1", "1/mbr0.5", "1/mbr1"}
    assert all(again["eval_bleu_by_setting"][key] == value for key, value in grid.items())
    assert again["test_beam_bleu"] == results["test_beam_bleu"]
    assert again["eval_bleu"] == max(again["eval_bleu_by_setting"].values())
    if again["mbr_scale"] is not None:
        assert again["length_exponent"] is None

    monkeypatch.undo()  # decoding again from here

    # Ensembles' folders (of one member each here) stand for their members; beam search takes the length penalty
    # the forward ensemble's scoring chose.
    forward = _ensemble_folder(tmp_path / "en-de-ensemble", [str(tmp_path / "en-de")], 1.6)
    channel = _ensemble_folder(tmp_path / "de-en-ensemble", [str(tmp_path / "de-en")], 0.6)
    from_ensembles = rerank_step.main(
        [
            "--model_dirs", str(forward), "--channel_model_dirs", str(channel),
            "--output_dir", str(tmp_path / "reranked-ensembles"), "--data_dir", str(data_dir), "--source_lang", "en",
            "--target_lang", "de", "--num_candidates", "3", "--channel_weights", "0", "1",
            "--length_exponents", "0.5", "1",
        ]
    )  # fmt: skip
    assert from_ensembles["models"] == [str(tmp_path / "en-de")]
    assert from_ensembles["channel_models"] == [str(tmp_path / "de-en")]
    assert from_ensembles["length_penalty"] == 1.6
    assert from_ensembles["parameters"] == saved["parameters"]

    # On CTranslate2 (each folder converted on loading): the engine recorded beside the lists, the parameters counted
    # from the weights, and lists kept by one engine not reused as the other's.
    pytest.importorskip("ctranslate2")

    def on(engine: str, output: str, *options: str) -> dict:
        return rerank_step.main(
            [
                "--model_dirs", str(tmp_path / "en-de"), "--channel_model_dirs", str(tmp_path / "de-en"),
                "--output_dir", str(tmp_path / output), "--data_dir", str(data_dir), "--source_lang", "en",
                "--target_lang", "de", "--num_candidates", "3", "--channel_weights", "0", "1",
                "--length_exponents", "0.5", "1", "--engine", engine, *options,
            ]
        )  # fmt: skip

    from hf_transformer.export.ctranslate2_export import CTranslate2Generator

    with monkeypatch.context() as spying:  # both engines give these models' tokens: the calls tell them apart
        generated = record_calls(spying, CTranslate2Generator, "generate")
        scored = record_calls(spying, CTranslate2Generator, "score")
        on_ctranslate2 = on("ctranslate2", "reranked-ct2")
    # CTranslate2 proposed the candidates (the forward model) and scored them both ways (the forward and the channel).
    assert len({id(generator) for generator in generated}) == 1 and len({id(g) for g in scored}) == 2
    assert on_ctranslate2["engine"] == "ctranslate2" and on_ctranslate2["quantization"] is None
    assert on_ctranslate2["parameters"] == saved["parameters"]
    assert on_ctranslate2["test_bleu"] > 25  # the toy language is translated on this engine too
    kept = json.loads((tmp_path / "reranked-ct2" / "candidates.json").read_text())
    assert kept["engine"] == "ctranslate2"
    with pytest.raises(ValueError, match="engine 'ctranslate2' there, 'torch' here"):
        on("torch", "again-torch", "--candidates_from", str(tmp_path / "reranked-ct2"))
    assert not (tmp_path / "again-torch").exists()  # a refusal leaves no folder behind
