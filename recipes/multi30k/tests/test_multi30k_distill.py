"""Sequence-level distillation (python -m recipes.multi30k.distill, and the training step's --distilled_targets): the
teacher's translations kept with what made them, continued after a stop, refused when they do not match, and trained
on by the student."""

from __future__ import annotations

import json

import pytest
import torch
from test_multi30k_train import TINY_MODEL, write_multi30k
from transformers import AutoTokenizer

from hf_transformer import Predictor, TransformerForConditionalGeneration
from recipes.multi30k import distill
from recipes.multi30k import train as train_step
from recipes.multi30k.data import DataArguments
from tests.helpers.models import record_calls, save_random_translator

pytestmark = pytest.mark.slow

WORDS = "the man woman dog cat runs sleeps eats red small big child house near green sees".split()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_multi30k(root, sizes=(("train", 60), ("val", 8), ("test_2016_flickr", 8)))
    return root


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, data_dir):
    """A random pre-LN translator with large weights (its beam outputs differ from its greedy ones), saved with a
    tokenizer of the toy language pair."""
    from hf_transformer.tokenization import train_tokenizer

    texts = (data_dir / "multi30k" / "train.en").read_text().splitlines()
    texts += (data_dir / "multi30k" / "train.de").read_text().splitlines()
    tokenizer = train_tokenizer(texts, vocab_size=120, model_type="bpe", model_max_length=64, show_progress=False)
    return save_random_translator(
        tmp_path_factory.mktemp("teacher"), tokenizer, max_position_embeddings=24, max_new_tokens=8
    )


def distill_args(teacher, output_dir, *extra):
    return ["--teacher", str(teacher), "--output_dir", str(output_dir), "--batch_size", "16", *extra]


def training_sources(data_dir, count=None):
    lines = (data_dir / "multi30k" / "train.en").read_text().splitlines()
    return lines[:count] if count else lines


class CountingPredictor:
    """Predictor.from_pretrained's result, counting the sources it is asked to translate."""

    translated: list[str] = []

    def __init__(self, predictor):
        self.predictor = predictor

    def translate(self, texts, **options):
        CountingPredictor.translated += list(texts)
        return self.predictor.translate(texts, **options)


@pytest.fixture
def counting(monkeypatch):
    CountingPredictor.translated = []
    load = Predictor.from_pretrained
    monkeypatch.setattr(Predictor, "from_pretrained", lambda *a, **k: CountingPredictor(load(*a, **k)))
    return CountingPredictor


def test_the_teacher_translates_every_training_source_once_and_records_how(tmp_path, data_dir, teacher, counting):
    output_dir = tmp_path / "distilled"
    args = distill_args(teacher, output_dir, "--data_dir", str(data_dir), "--num_beams", "3", "--chunk_size", "25")
    record = distill.main(args)
    sources = training_sources(data_dir)
    assert counting.translated == sources  # in three chunks, each source once
    translations = (output_dir / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    # The same batches as the step's (chunks of 25, batches of 16), so the same arithmetic on any CPU.
    reference = Predictor.from_pretrained(teacher, batch_size=16)
    expected = [t for start in range(0, 60, 25) for t in reference.translate(sources[start : start + 25], num_beams=3)]
    assert translations == expected and len(translations) == 60
    # Beam 3 is what ran: greedy decoding of this model gives other outputs for some sources.
    assert translations != Predictor.from_pretrained(teacher).translate(sources, num_beams=1)
    assert record["finished"] is True and record["sources"] == 60 and record["num_beams"] == 3
    assert record["teacher"][0]["weights_sha256"] == distill.weights_sha256(teacher)
    assert record["sources_sha256"] == distill.sha256_text(sources) and record["seconds"] > 0
    assert not (output_dir / "train.de.partial").exists()

    counting.translated = []  # a second run reuses the finished folder without decoding anything
    assert distill.main(args)["finished"] and counting.translated == []
    assert (output_dir / "train.de").read_text(encoding="utf-8").split("\n")[:-1] == translations


def test_a_stopped_run_continues_where_it_stopped(tmp_path, data_dir, teacher, counting):
    output_dir = tmp_path / "distilled"
    args = distill_args(teacher, output_dir, "--data_dir", str(data_dir), "--chunk_size", "20")
    distill.main(args)
    whole = (output_dir / "train.de").read_text(encoding="utf-8")
    # As a run stopped after its first chunk leaves the folder:
    record = json.loads((output_dir / distill.RECORD_FILE).read_text())
    (output_dir / distill.RECORD_FILE).write_text(json.dumps(record | {"finished": False}))
    (output_dir / "train.de").unlink()
    # ... with the first characters of the next translation, cut off by the stop: dropped, not glued to it.
    kept = "".join(whole.splitlines(keepends=True)[:20]) + whole.splitlines()[20][:4]
    (output_dir / "train.de.partial").write_text(kept, encoding="utf-8")
    counting.translated = []
    record = distill.main(args)
    assert counting.translated == training_sources(data_dir)[20:]
    assert (output_dir / "train.de").read_text(encoding="utf-8") == whole
    # Each run is a session of the record: the first translated all 60, the continuation the last 40.
    assert [session["translated"] for session in record["sessions"]] == [60, 40]
    assert record["seconds"] == pytest.approx(sum(session["seconds"] for session in record["sessions"]), abs=0.02)


def test_a_stopped_run_keeps_the_time_it_spent(tmp_path, data_dir, teacher, counting, monkeypatch):
    output_dir = tmp_path / "distilled"
    args = distill_args(teacher, output_dir, "--data_dir", str(data_dir), "--chunk_size", "20")
    translate = CountingPredictor.translate

    def stop_after_two_chunks(self, texts, **options):
        if len(CountingPredictor.translated) >= 40:
            raise KeyboardInterrupt
        return translate(self, texts, **options)

    monkeypatch.setattr(CountingPredictor, "translate", stop_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        distill.main(args)
    record = json.loads((output_dir / distill.RECORD_FILE).read_text())
    assert record["finished"] is False and len(record["sessions"]) == 1
    session = record["sessions"][0]
    assert session["translated"] == 40 and session["seconds"] > 0 and record["seconds"] == session["seconds"]
    assert session["device"] == "cpu" and session["host"]
    assert len((output_dir / "train.de.partial").read_text(encoding="utf-8").splitlines()) == 40


def test_a_record_from_before_sessions_keeps_its_time(tmp_path, data_dir, teacher, counting):
    output_dir = tmp_path / "distilled"
    args = distill_args(teacher, output_dir, "--data_dir", str(data_dir), "--chunk_size", "20")
    distill.main(args)
    record = json.loads((output_dir / distill.RECORD_FILE).read_text())
    legacy = {key: value for key, value in record.items() if key != "sessions"} | {"finished": False, "seconds": 5.0}
    (output_dir / distill.RECORD_FILE).write_text(json.dumps(legacy))
    (output_dir / "train.de").unlink()
    record = distill.main(args)
    assert [session["seconds"] for session in record["sessions"]][0] == 5.0 and len(record["sessions"]) == 2
    assert record["seconds"] == pytest.approx(5.0 + record["sessions"][1]["seconds"], abs=0.02)


@pytest.mark.parametrize(
    "change, named",
    [
        (["--num_beams", "2"], "num_beams 5 there, 2 here"),
        (["--length_penalty", "0.6"], "length_penalty None there, 0.6 here"),
        (["--max_train_samples", "30"], "sources 60 there, 30 here"),
    ],
)
def test_a_folder_decoded_otherwise_is_refused(tmp_path, data_dir, teacher, change, named):
    output_dir = tmp_path / "distilled"
    distill.main(distill_args(teacher, output_dir, "--data_dir", str(data_dir)))
    with pytest.raises(ValueError, match="decoded otherwise") as error:
        distill.main(distill_args(teacher, output_dir, "--data_dir", str(data_dir), *change))
    assert named in str(error.value)


def test_a_folder_holding_a_translation_file_no_record_accounts_for_is_refused(tmp_path, data_dir, teacher):
    # The corpus's own folder given as --output_dir: its train.de was replaced by the teacher's translations.
    corpus = data_dir / "multi30k" / "train.de"
    before = corpus.read_bytes()
    with pytest.raises(ValueError, match=r"multi30k holds train.de but no distillation.json: it is no distillation's"):
        distill.main(distill_args(teacher, data_dir / "multi30k", "--data_dir", str(data_dir)))
    assert corpus.read_bytes() == before


def test_another_teachers_weights_are_refused(tmp_path, data_dir, teacher):
    output_dir = tmp_path / "distilled"
    distill.main(distill_args(teacher, output_dir, "--data_dir", str(data_dir), "--max_train_samples", "10"))
    other = tmp_path / "other-teacher"
    model = TransformerForConditionalGeneration.from_pretrained(teacher)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.01)
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(other)
    with pytest.raises(ValueError, match="the teacher's weights differ"):
        distill.main(distill_args(other, output_dir, "--data_dir", str(data_dir), "--max_train_samples", "10"))


@pytest.fixture(scope="module")
def channel(tmp_path_factory, teacher):
    """A second random model on the same tokenizer, scoring sources given candidates (the reverse direction's role)."""
    model = TransformerForConditionalGeneration.from_pretrained(teacher)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    folder = tmp_path_factory.mktemp("channel")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(folder)
    return folder


def reranking_folder(path, forward, channel, **chosen):
    """A folder as recipes.multi30k.rerank leaves it (results.json only), with the setting ``chosen``."""
    path.mkdir(parents=True)
    record = {"task": "translation_en_to_de", "models": [str(forward)], "channel_models": [str(channel)]}
    record |= {"num_candidates": 3, "length_penalty": 1.0, "channel_weight": 1.0, "length_exponent": 0.5}
    (path / "results.json").write_text(json.dumps(record | {"mbr_scale": None} | chosen))
    return path


@pytest.mark.parametrize("chosen", [{}, {"mbr_scale": 1.0, "length_exponent": None}], ids=["argmax", "mbr"])
def test_a_reranked_teacher_translates_as_its_reranking_chose(tmp_path, data_dir, teacher, channel, chosen):
    from recipes.multi30k.reranking import candidates, mbr_utilities, rerank, sequence_log_probs

    reranked = reranking_folder(tmp_path / "reranked", teacher, channel, **chosen)
    output_dir = tmp_path / "distilled"
    args = distill_args(reranked, output_dir, "--data_dir", str(data_dir), "--max_train_samples", "30")
    record = distill.main([*args, "--chunk_size", "20"])
    translations = (output_dir / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    sources = training_sources(data_dir, 30)
    # The reranking's own functions on the step's chunks and batches: each source's 3-best rescored with the channel.
    forward, reverse = (
        Predictor.from_pretrained(teacher, batch_size=16),
        Predictor.from_pretrained(channel, batch_size=16),
    )
    setting = {"channel_weight": 1.0, "length_exponent": 0.5, "mbr_scale": None} | chosen
    expected, best = [], []
    for start in (0, 20):
        chunk = sources[start : start + 20]
        nbest = candidates(forward, chunk, 3, num_beams=3, length_penalty=1.0, max_new_tokens=None)
        xs = [source for source, row in zip(chunk, nbest) for _ in row]
        ys = [candidate for row in nbest for candidate in row]
        scores = sequence_log_probs(forward, xs, ys), sequence_log_probs(reverse, ys, xs)
        utilities = mbr_utilities(nbest) if setting["mbr_scale"] is not None else None
        expected += rerank(nbest, *scores, **setting, utilities=utilities)
        best += [row[0] for row in nbest]
    assert translations == expected
    assert translations != best  # the reranking chose other candidates than beam search's first for some sources
    assert record["num_beams"] == 3 and record["reranking"] == setting | {"num_candidates": 3}
    assert record["channel"][0]["weights_sha256"] == distill.weights_sha256(channel)
    assert record["teacher"][0]["weights_sha256"] == distill.weights_sha256(teacher)

    # Another chosen setting (the reranking run again with another grid) does not reuse these translations.
    other = reranking_folder(tmp_path / "reranked-again", teacher, channel, **(chosen | {"channel_weight": 0.5}))
    with pytest.raises(ValueError, match="decoded otherwise.*reranking"):
        distill.main(distill_args(other, output_dir, "--data_dir", str(data_dir), "--max_train_samples", "30"))
    with pytest.raises(ValueError, match="chose among 3-best lists"):
        distill.main([*args, "--num_beams", "4"])
    with pytest.raises(ValueError, match="decoded with length penalty 1.0 \\(leave --length_penalty out\\)"):
        distill.main([*args, "--length_penalty", "2.0"])
    # A reranking of the other direction (its results.json says so) is refused before anything is decoded.
    backwards = reranking_folder(tmp_path / "backwards", teacher, channel, **chosen)
    record = json.loads((backwards / "results.json").read_text())
    (backwards / "results.json").write_text(json.dumps(record | {"source_lang": "de", "target_lang": "en"}))
    with pytest.raises(ValueError, match="--teacher .*backwards translates de -> en .*not en -> de"):
        distill.main(distill_args(backwards, tmp_path / "other", "--data_dir", str(data_dir)))


def test_a_reranking_chosen_on_ctranslate2s_scores_decodes_with_ctranslate2(
    tmp_path, data_dir, teacher, channel, monkeypatch
):
    """A reranking run with --engine ctranslate2 chose its setting on that engine's scores: its n-best lists and
    scores come from CTranslate2 here too, the record says so, and another engine is refused."""
    pytest.importorskip("ctranslate2")
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator
    from recipes.multi30k.reranking import candidates, rerank, score_both_ways

    reranked = reranking_folder(tmp_path / "reranked", teacher, channel, engine="ctranslate2", quantization=None)
    output_dir = tmp_path / "distilled"
    args = distill_args(reranked, output_dir, "--data_dir", str(data_dir), "--max_train_samples", "20")
    with monkeypatch.context() as spying:  # both engines give these toy models' tokens: the calls tell them apart
        generated = record_calls(spying, CTranslate2Generator, "generate")
        scored = record_calls(spying, CTranslate2Generator, "score")
        record = distill.main(args)
    assert record["engine"] == "ctranslate2" and record["quantization"] is None
    # CTranslate2 proposed the candidates (the forward model) and scored them both ways (the forward and the channel).
    assert len({id(generator) for generator in generated}) == 1 and len({id(g) for g in scored}) == 2
    forward = Predictor.from_pretrained(teacher, engine="ctranslate2", batch_size=16)
    reverse = Predictor.from_pretrained(channel, engine="ctranslate2", batch_size=16)
    sources = training_sources(data_dir, 20)
    nbest = candidates(forward, sources, 3, num_beams=3, length_penalty=1.0, max_new_tokens=None)
    setting = {"channel_weight": 1.0, "length_exponent": 0.5, "mbr_scale": None}
    expected = rerank(nbest, *score_both_ways(forward, reverse, sources, nbest), **setting)
    assert (output_dir / "train.de").read_text(encoding="utf-8").split("\n")[:-1] == expected
    with pytest.raises(ValueError, match="chose its setting on engine 'ctranslate2'.s scores"):
        distill.main([*args, "--engine", "torch"])

    # A folder a torch reranking decoded, its record from before the engine was recorded (no engine keys): reused
    # as torch's, and not continued with CTranslate2.
    torch_reranked = reranking_folder(tmp_path / "torch-reranked", teacher, channel)
    older = tmp_path / "older"
    subset = ("--data_dir", str(data_dir), "--max_train_samples", "20")
    distill.main(distill_args(torch_reranked, older, *subset))
    saved = json.loads((older / distill.RECORD_FILE).read_text())
    assert saved.pop("engine") == "torch" and saved.pop("quantization") is None
    (older / distill.RECORD_FILE).write_text(json.dumps(saved))
    assert distill.main(distill_args(torch_reranked, older, *subset))["finished"]
    with pytest.raises(ValueError, match="engine 'torch' there, 'ctranslate2' here"):
        distill.main(distill_args(reranked, older, *subset))
    with pytest.raises(ValueError, match="--quantization int8 applies to --engine ctranslate2"):
        distill.main(distill_args(teacher, tmp_path / "plain", *subset, "--quantization", "int8"))


def train_split(data_dir, count=None):
    data_args = DataArguments(data_dir=str(data_dir), max_train_samples=count)
    return data_args.splits()["train"]


def test_the_students_pairs_replace_or_join_the_originals(tmp_path, data_dir, teacher):
    output_dir = tmp_path / "distilled"
    distill.main(distill_args(teacher, output_dir, "--data_dir", str(data_dir)))
    train = train_split(data_dir)
    teacher_lines = (output_dir / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    kept = [i for i, line in enumerate(teacher_lines) if line.strip()]
    replaced = list(distill.with_distilled_targets(train, output_dir, "en", "de", "replace")["translation"])
    assert [row["de"] for row in replaced] == [teacher_lines[i] for i in kept]
    assert [row["en"] for row in replaced] == [train[i]["translation"]["en"] for i in kept]
    both = list(distill.with_distilled_targets(train, output_dir, "en", "de", "both")["translation"])
    assert both == list(train["translation"]) + replaced
    # Several teachers: each adds its own translation of every source, in the order given.
    other = tmp_path / "other"
    other.mkdir()
    other_lines = [f"{line} zwei" if line.strip() else "" for line in teacher_lines]
    (other / "train.de").write_text("".join(line + "\n" for line in other_lines), encoding="utf-8")
    (other / distill.RECORD_FILE).write_bytes((output_dir / distill.RECORD_FILE).read_bytes())
    two = list(distill.with_distilled_targets(train, [output_dir, other], "en", "de", "both")["translation"])
    assert two[: len(both)] == both
    assert [row["de"] for row in two[len(both) :]] == [other_lines[i] for i in kept]
    assert [row["en"] for row in two[len(both) :]] == [row["en"] for row in replaced]
    (other / distill.RECORD_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=f"--distilled_targets {other}: no distillation.json"):
        distill.with_distilled_targets(train, [output_dir, other], "en", "de", "replace")


def test_the_student_refuses_translations_of_other_sources_or_direction_or_unfinished(tmp_path, data_dir, teacher):
    output_dir = tmp_path / "distilled"
    distill.main(distill_args(teacher, output_dir, "--data_dir", str(data_dir)))
    with pytest.raises(ValueError, match="other sources than these 30"):
        distill.with_distilled_targets(train_split(data_dir, 30), output_dir, "en", "de", "replace")
    with pytest.raises(ValueError, match="translates en -> de, not de -> en"):
        distill.with_distilled_targets(train_split(data_dir), output_dir, "de", "en", "replace")
    with pytest.raises(ValueError, match="--distillation_mix must be one of replace, both"):
        distill.with_distilled_targets(train_split(data_dir), output_dir, "en", "de", "teacher")
    record = json.loads((output_dir / distill.RECORD_FILE).read_text())
    (output_dir / distill.RECORD_FILE).write_text(json.dumps(record | {"finished": False}))
    with pytest.raises(ValueError, match="has not finished"):
        distill.with_distilled_targets(train_split(data_dir), output_dir, "en", "de", "replace")
    with pytest.raises(FileNotFoundError, match="no distillation.json"):
        distill.with_distilled_targets(train_split(data_dir), tmp_path, "en", "de", "replace")


def test_the_training_step_trains_the_student_on_the_teachers_pairs(tmp_path, data_dir, teacher, monkeypatch):
    distilled = tmp_path / "distilled"
    distill.main(distill_args(teacher, distilled, "--data_dir", str(data_dir)))
    teacher_lines = (distilled / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    originals = list(train_split(data_dir)["translation"])
    teachers_pairs = [{"en": pair["en"], "de": line} for pair, line in zip(originals, teacher_lines) if line.strip()]
    kept = len(teachers_pairs)

    def as_tuples(rows) -> set[tuple[str, str]]:
        return {(row["en"], row["de"]) for row in rows}

    assert kept and not as_tuples(teachers_pairs) & as_tuples(originals)  # the teacher's targets are not the references
    common = ["--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de", *TINY_MODEL]
    common += ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_beams", "1", "--seed", "1"]
    common += ["--distilled_targets", str(distilled)]

    def trained_on(output: str, *options: str) -> tuple[dict, list[dict]]:
        """The step's results and the training pairs it tokenized for training."""
        tokenized = []
        tokenize = train_step.tokenize

        def recording(splits, *args, **kwargs):
            tokenized.append(list(splits["train"]["translation"]))
            return tokenize(splits, *args, **kwargs)

        with monkeypatch.context() as spying:
            spying.setattr(train_step, "tokenize", recording)
            results = train_step.main(["--output_dir", str(tmp_path / output), *common, *options])
        (pairs,) = tokenized
        return results, pairs

    # The default, replace: the teacher's pairs alone.
    results, pairs = trained_on("replace")
    assert results["distillation_mix"] == "replace" and results["train_samples"] == kept
    assert pairs == teachers_pairs
    results, pairs = trained_on("both", "--distillation_mix", "both")
    assert pairs == originals + teachers_pairs
    assert results["train_samples"] == 60 + kept
    assert results["distilled_targets"] == [str(distilled)] and results["distillation_mix"] == "both"
    card = (tmp_path / "both" / "README.md").read_text(encoding="utf-8")
    assert "translated by a teacher model" in card
    assert train_step.teacher_models([str(distilled), str(distilled)]) == "2 teacher models"
    with pytest.raises(ValueError, match="--distillation_mix must be one of"):
        train_step.main(["--output_dir", str(tmp_path / "x"), *common, "--distillation_mix", "mixed"])


def test_the_readmes_distill_command_parses():
    from pathlib import Path

    from transformers import HfArgumentParser

    readme = (Path(distill.__file__).parent / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [line for line in readme.splitlines() if line.startswith("python -m recipes.multi30k.distill")]
    args, data_args = HfArgumentParser((distill.DistillArguments, DataArguments)).parse_args_into_dataclasses(
        args=line.split()[3:]
    )
    # The reranking train_reranked.sh writes (in its default output folder), its n-best size left to the reranking.
    assert args.teacher == ["runs/m30k-reranked/en-de-reranked"] and args.num_beams is None and args.device == "cuda"
    script = (Path(distill.__file__).parent / "train_reranked.sh").read_text(encoding="utf-8")
    assert "output_dir=${2:-runs/m30k-reranked}" in script
    assert '--output_dir "$output_dir/$source_lang-$target_lang-reranked"' in script
    assert (data_args.source_lang, data_args.target_lang) == ("en", "de")
