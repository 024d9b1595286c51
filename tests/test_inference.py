"""hf_transformer.Predictor (text in, text out), the registered translation pipeline, and int8 through torch's own
quantize_dynamic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import pipeline

from hf_transformer import (
    PIPELINE_TASK,
    Predictor,
    TransformerForConditionalGeneration,
    TransformerForSequenceClassification,
)
from tests.helpers.models import SENTENCES, sentence_tokenizer, tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    return sentence_tokenizer()


@pytest.fixture(scope="module")
def translator(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), n_layer=2, max_position_embeddings=12, init_std=0.3)
    model = TransformerForConditionalGeneration(config).eval()
    model.generation_config.num_beams = 3
    model.generation_config.max_new_tokens = 7
    folder = tmp_path_factory.mktemp("translator")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=2, id2label={0: "neg", 1: "pos"}, n_layer=1)
    config.label2id = {"neg": 0, "pos": 1}
    model = TransformerForSequenceClassification(config).eval()
    folder = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def one_by_one(model, tokenizer, texts, **options):
    """Each text alone (no padding), truncated to the model's 12 positions."""
    outputs = []
    for text in texts:
        ids = tokenizer([text], return_tensors="pt", truncation=True, max_length=12)["input_ids"]
        with torch.no_grad():
            generated = model.generate(ids, **options)
        outputs.append(tokenizer.decode(generated[0], skip_special_tokens=True).strip())
    return outputs


@pytest.mark.slow
def test_translations_come_back_in_input_order_whatever_the_batching(translator, tokenizer):
    folder, model = translator
    texts = SENTENCES[::-1]
    expected = one_by_one(model, tokenizer, texts)  # the saved generation config: beam 3, 7 new tokens
    assert len(set(expected)) > 5  # the texts are told apart
    for batch_size in (1, 5, 64):
        predictor = Predictor.from_pretrained(folder, batch_size=batch_size)
        assert predictor.translate(texts) == expected
    # Generation options go to generate: per predictor, or per call.
    greedy = one_by_one(model, tokenizer, texts, num_beams=1, max_new_tokens=3)
    assert Predictor.from_pretrained(folder, num_beams=1, max_new_tokens=3).translate(texts) == greedy
    assert predictor.translate(texts, num_beams=1, max_new_tokens=3) == greedy


def test_max_length_counts_the_start_token_and_bad_settings_are_refused(translator, classifier, tokenizer):
    folder, model = translator
    texts = SENTENCES[:4]
    # Each comparison decodes the same batches the same way (the same products on any CPU); only the length differs.
    predictor = Predictor.from_pretrained(folder)
    three_tokens = predictor.translate(texts, max_new_tokens=3)
    assert three_tokens != predictor.translate(texts)  # the saved 7 new tokens
    assert predictor.translate(texts, max_length=4) == three_tokens  # HF's max_length counts the start token
    assert Predictor.from_pretrained(folder, max_length=4).translate(texts) == three_tokens
    assert Predictor.from_pretrained(folder, max_new_tokens=7).translate(texts, max_length=4) == three_tokens
    translate = pipeline(PIPELINE_TASK, model=str(folder))
    three_tokens = [row["translation_text"] for row in translate(texts, max_new_tokens=3)]
    assert [row["translation_text"] for row in translate(texts, max_length=4)] == three_tokens
    for options, message in (
        (dict(max_new_tokens=0), "`max_new_tokens` must be an integer of at least 1, got 0"),
        (dict(max_length=1), "`max_length` must be an integer of at least 2, got 1"),
        (dict(num_beams=0), "`num_beams` must be an integer of at least 1, got 0"),
    ):
        with pytest.raises(ValueError, match=message):
            predictor.translate(texts, **options)
    with pytest.raises(ValueError, match="`num_beams` must be an integer of at least 1, got 0"):
        model.generate(tokenizer(texts[:1], return_tensors="pt")["input_ids"], num_beams=0)
    with pytest.raises(FileNotFoundError, match="No folder at .*no-such-folder"):
        Predictor.from_pretrained(folder / "no-such-folder")
    for loaded in (predictor, Predictor.from_pretrained(classifier[0])):
        with pytest.raises(TypeError, match="texts must be strings; texts\\[1\\] is NoneType"):
            loaded([texts[0], None])
        for wrong in (None, b"a dog", 3):
            with pytest.raises(TypeError, match=f"texts must be a list of strings, got {type(wrong).__name__}"):
                loaded(wrong)
    with pytest.raises(ValueError, match="`max_new_tokens` must be an integer of at least 1, got True"):
        predictor.translate(texts, max_new_tokens=True)  # a flag is not a length
    # A misspelt option is refused where it is given, naming the close one, not at the first translation.
    with pytest.raises(TypeError, match=r"takes no option num_beam \(did you mean num_beams\?\)"):
        Predictor.from_pretrained(folder, num_beam=2)
    with pytest.raises(TypeError, match="takes no option batch_sise"):
        predictor.translate(texts, batch_sise=2)
    with pytest.raises(TypeError, match=r"model_dir\[1\] is NoneType, not a folder"):
        Predictor.from_pretrained([folder, None])
    with pytest.raises(FileNotFoundError, match="No folder at runs/no-such-model, and no Hub model of that id loads"):
        Predictor.from_pretrained("runs/no-such-model")  # a name like a Hub id, offline in the tests


def candidates_batch_by_batch(tokenizer, texts, batch_size, count, generate):
    """Each text's `count` candidates, from `generate` called on the very batches a Predictor of `batch_size` decodes
    (texts sorted by length, padded, cut at the model's 12 positions), its rows grouped here by text: the same
    computation, so the same tokens on any CPU, and the grouping checked independently."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    found = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        batch = tokenizer(
            [texts[i] for i in indices], return_tensors="pt", padding=True, truncation=True, max_length=12
        )
        decoded = tokenizer.batch_decode(
            generate(batch["input_ids"], batch["attention_mask"]), skip_special_tokens=True
        )
        for row, index in enumerate(indices):
            found[index] = [output.strip() for output in decoded[row * count : (row + 1) * count]]
    return found


def test_several_candidates_per_text_stay_with_their_text(translator, tokenizer):
    folder, model = translator
    texts = SENTENCES[:7]
    results = Predictor.from_pretrained(folder, batch_size=3)(texts, num_beams=4, num_return_sequences=3)

    def generate(input_ids, attention_mask):
        with torch.no_grad():
            return model.generate(input_ids, attention_mask=attention_mask, num_beams=4, num_return_sequences=3)

    expected = candidates_batch_by_batch(tokenizer, texts, 3, 3, generate)
    for text, result, own in zip(texts, results, expected):
        assert result["text"] == text
        assert result["translations"] == own and result["translation"] == own[0]
    assert len({result["translation"] for result in results}) > 3  # the texts are told apart


def test_a_list_of_folders_translates_as_their_ensemble(translator, tokenizer, tmp_path):
    folder, model = translator
    texts = SENTENCES[:9]
    # Two copies of one model are that model; a second, different model changes the translations.
    assert Predictor.from_pretrained([folder, folder], batch_size=4).translate(texts) == one_by_one(
        model, tokenizer, texts
    )
    torch.manual_seed(1)
    other = TransformerForConditionalGeneration(model.config).eval()
    other.save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    ensemble = Predictor.from_pretrained([folder, tmp_path / "other"], num_beams=1)
    assert ensemble.translate(texts) != Predictor.from_pretrained(folder, num_beams=1).translate(texts)
    assert ensemble.input_length_limit() == 12  # the first member's position table, as for one folder
    with pytest.raises(ValueError, match="engine='torch'"):
        Predictor.from_pretrained([folder, folder], engine="ctranslate2")


def test_inputs_are_truncated_at_the_smaller_of_tokenizer_and_position_table(translator, tokenizer):
    folder, model = translator
    long_text = " ".join(SENTENCES[:4])
    assert len(tokenizer(long_text)["input_ids"]) > 12 and tokenizer.model_max_length == 256
    with pytest.raises(ValueError, match="exceeds the position table"):  # what truncation=True alone gives
        model.generate(**tokenizer([long_text], return_tensors="pt", truncation=True))
    predictor = Predictor.from_pretrained(folder)
    assert predictor.input_length_limit() == 12
    assert predictor.translate([long_text]) == one_by_one(model, tokenizer, [long_text])


def test_a_length_past_the_decoder_positions_is_lowered_with_generate_s_warning(translator, recwarn):
    folder, model = translator  # 12 decoder positions
    texts = SENTENCES[:2]
    translate = pipeline(PIPELINE_TASK, model=str(folder))
    predictor = Predictor.from_pretrained(folder)
    recwarn.clear()
    within = predictor.translate(texts, max_new_tokens=12), translate(texts, max_new_tokens=12)
    assert not [w for w in recwarn if "position table" in str(w.message)]
    with pytest.warns(UserWarning, match=r"`max_new_tokens`=100 goes past the decoder's position table of 12"):
        assert predictor.translate(texts, max_new_tokens=100) == within[0]
    with pytest.warns(UserWarning, match=r"`max_length`=101 goes past the decoder's position table of 12"):
        assert translate(texts, max_length=101) == within[1]


def test_predict_file_writes_one_line_per_input_in_order(translator, tokenizer, tmp_path, capsys):
    folder, model = translator
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES[:3]) + "\n\n" + "\n".join(SENTENCES[3:6]) + "\n\n", encoding="utf-8")
    predictor = Predictor.from_pretrained(folder, batch_size=4)
    assert predictor.predict_file(source, tmp_path / "out.txt") == 8  # blank lines kept: line N answers line N
    written = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    expected = one_by_one(model, tokenizer, SENTENCES[:6])
    assert written == [*expected[:3], "", *expected[3:], "", ""]
    assert "translating" in capsys.readouterr().err  # the progress bar
    # What it would write over, or cannot write, is refused before any translation; nothing is changed.
    before = source.read_bytes()
    refused = {
        source: "is the file this command reads",
        tmp_path: "is a folder",
        Path(folder) / "config.json": "is a file of the saved model",
        tmp_path / "absent" / "out.txt": "its folder .*absent does not exist",
    }
    for target, told in refused.items():
        with pytest.raises((ValueError, FileNotFoundError), match=f"target .*{told}"):
            predictor.predict_file(source, target, progress=False)
    assert source.read_bytes() == before and "translating" not in capsys.readouterr().err


def test_generate_returning_a_model_output_gives_the_same_translations(translator, tmp_path):
    """`return_dict_in_generate` makes generate return a ModelOutput instead of the ids: asked in a call, or saved in
    the folder's generation config, Predictor and the translation pipeline read its sequences and translate alike."""
    import shutil

    folder, _ = translator
    texts = SENTENCES[:4]
    expected = Predictor.from_pretrained(folder).translate(texts)
    assert Predictor.from_pretrained(folder).translate(texts, return_dict_in_generate=True) == expected
    saved = tmp_path / "dict-output"
    shutil.copytree(folder, saved)
    generation = json.loads((saved / "generation_config.json").read_text())
    generation.update(return_dict_in_generate=True, output_scores=True)
    (saved / "generation_config.json").write_text(json.dumps(generation))
    assert Predictor.from_pretrained(saved).translate(texts) == expected
    translate = pipeline(PIPELINE_TASK, model=str(saved))
    assert [row["translation_text"] for row in translate(texts)] == expected


def test_a_blank_text_is_not_translated(translator, monkeypatch):
    folder, model = translator
    predictor = Predictor.from_pretrained(folder, num_beams=2)
    rows_generated = []
    generate = type(predictor.model).generate

    def counting_generate(self, **inputs):
        rows_generated.append(len(inputs["input_ids"]))
        return generate(self, **inputs)

    monkeypatch.setattr(type(predictor.model), "generate", counting_generate)
    results = predictor(["", "a dog .", "   "])
    assert [r["translation"] for r in (results[0], results[2])] == ["", ""]  # not the model's guess from nothing
    assert results[1]["translation"] == predictor.translate(["a dog ."])[0] != ""
    assert rows_generated[0] == 1  # only the one text was decoded
    assert predictor(["", ""]) == [{"text": "", "translation": ""}] * 2
    several = predictor(["", "a dog ."], num_beams=3, num_return_sequences=2)
    assert several[0]["translations"] == ["", ""] and len(several[1]["translations"]) == 2


def test_options_a_classifier_cannot_use_and_bad_arguments_are_refused_not_ignored(classifier, tmp_path):
    from pathlib import PurePosixPath

    from hf_transformer.inference import read_lines

    folder, _ = classifier
    with pytest.raises(TypeError, match="takes no option batch_sise"):
        Predictor.from_pretrained(folder, batch_sise=1)  # misspelt: batch_size stayed 32
    predictor = Predictor.from_pretrained(PurePosixPath(folder), batch_size=2)  # any os.PathLike
    with pytest.raises(TypeError, match="takes no option num_beams"):
        predictor(["a dog ."], num_beams=4)
    for wrong in (1.5, "8", True, 0):
        with pytest.raises(ValueError, match="batch_size must be an integer of at least 1"):
            Predictor.from_pretrained(folder, batch_size=wrong)
    with pytest.raises(TypeError, match="model_dir is a folder .* got NoneType"):
        Predictor.from_pretrained(None)
    # A file saved as "UTF-8 with BOM" reads its first line as the text, not as an unknown token before it.
    (tmp_path / "bom.txt").write_bytes("\ufeffa dog .\nthe cat\n".encode())
    with open(tmp_path / "bom.txt", encoding="utf-8") as stream:
        assert read_lines(stream) == ["a dog .", "the cat"]
    predictor.predict_file(tmp_path / "bom.txt", tmp_path / "out.txt", progress=False)
    assert (tmp_path / "out.txt").read_text().splitlines()[0].endswith("\ta dog .")


def test_classifier_folder(classifier, tokenizer):
    folder, model = classifier
    predictor = Predictor.from_pretrained(folder, batch_size=3)
    results = predictor.classify(SENTENCES[:7])
    with torch.no_grad():
        batch = tokenizer(SENTENCES[:7], return_tensors="pt", padding=True)
        probabilities = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits.softmax(-1)
    for result, row in zip(results, probabilities):
        assert result["label"] == ("pos" if row[1] > row[0] else "neg")
        assert result["scores"]["pos"] == pytest.approx(row[1].item(), abs=1e-5)
    with pytest.raises(ValueError, match="classifier"):
        predictor.translate(["a dog ."])
    with pytest.raises(TypeError, match="list of strings"):
        predictor("a dog .")
    with pytest.raises(ValueError, match="seq2seq"):
        Predictor.from_pretrained(folder, engine="ctranslate2")


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_labels=1, problem_type="regression"),
        dict(num_labels=1),  # one label, no problem type: a sigmoid, as the pipeline gives it
        dict(num_labels=3, problem_type="multi_label_classification"),
        dict(num_labels=3),
    ],
    ids=["regression", "one-label", "multi-label", "single-label"],
)
def test_classifier_scores_are_the_text_classification_pipeline_s(tokenizer, tmp_path, settings):
    # A softmax over one regression output is always 1.0, and a softmax over independent labels is not their
    # probabilities: the scores follow the problem type, as transformers' pipeline reads it.
    torch.manual_seed(0)
    model = TransformerForSequenceClassification(tiny_config(vocab_size=len(tokenizer), n_layer=1, **settings))
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    texts = SENTENCES[:4]
    ours = Predictor.from_pretrained(tmp_path).classify(texts)
    theirs = pipeline("text-classification", model=str(tmp_path), top_k=None)(texts)
    for result, expected in zip(ours, theirs):
        assert result["scores"] == pytest.approx({row["label"]: row["score"] for row in expected}, abs=1e-5)
        assert (result["label"], result["score"]) == (
            expected[0]["label"],
            pytest.approx(expected[0]["score"], abs=1e-5),
        )
    if settings.get("problem_type") == "regression":
        assert len({result["score"] for result in ours}) == len(texts)  # values, not a constant probability of 1


def test_transformers_pipeline_translates_and_classifies(translator, classifier, tokenizer):
    folder, model = translator
    translate = pipeline(PIPELINE_TASK, model=str(folder))
    texts = SENTENCES[:3]
    # As transformers 4 answered: a list of texts gives one dict per text, a text a list of its candidates.
    assert [row["translation_text"] for row in translate(texts)] == one_by_one(model, tokenizer, texts)
    assert (
        translate(texts[0], num_beams=1, max_new_tokens=3)[0]["translation_text"]
        == one_by_one(model, tokenizer, texts[:1], num_beams=1, max_new_tokens=3)[0]
    )
    candidates = translate(texts[:2], num_beams=3, num_return_sequences=2)
    assert [len(row) for row in candidates] == [2, 2] and candidates[0][0] == translate(texts[0], num_beams=3)[0]
    assert translate([]) == []
    # Batched, each text keeps its own candidates: generate's on the very batches the pipeline decodes (the texts in
    # order, padded), its rows grouped here by text. The same computation, so the same tokens on any CPU.
    several = SENTENCES[::-1][:6]
    for batch_size in (2, 3):
        expected = []
        for start in range(0, len(several), batch_size):
            batch = tokenizer(several[start : start + batch_size], return_tensors="pt", padding=True)
            with torch.no_grad():
                rows = model.generate(**batch, num_beams=3, num_return_sequences=2, max_new_tokens=7)
            decoded = [text.strip() for text in tokenizer.batch_decode(rows, skip_special_tokens=True)]
            expected += [decoded[row : row + 2] for row in range(0, len(decoded), 2)]
        batched = translate(several, num_beams=3, num_return_sequences=2, batch_size=batch_size)
        assert [[candidate["translation_text"] for candidate in row] for row in batched] == expected
        assert len({tuple(row) for row in expected}) > 3  # the texts are told apart: a text given another's shows
    batched_ids = translate(texts, num_return_sequences=2, batch_size=2, return_tensors=True)
    assert [len(row) for row in batched_ids] == [2, 2, 2]
    ids = translate(texts[0], return_tensors=True)[0]["translation_token_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True).strip() == translate(texts[0])[0]["translation_text"]
    with pytest.raises(KeyError, match="removed"):  # why the task has a name of its own
        pipeline("translation", model=str(folder))

    classifier_folder, _ = classifier
    classify = pipeline("text-classification", model=str(classifier_folder))
    expected = Predictor.from_pretrained(classifier_folder).classify(texts)
    assert [row["label"] for row in classify(texts)] == [row["label"] for row in expected]


def test_a_folder_saving_max_length_translates_without_transformers_warning(translator, tokenizer, tmp_path):
    """The training scripts save `max_length` in generation_config.json; the pipeline and the Predictor pass their
    limit in that field, so generate() never warns that both `max_new_tokens` and `max_length` are set."""
    import logging

    _, model = translator
    folder = tmp_path / "trained"
    saved = model.generation_config
    model.generation_config = type(saved).from_dict({**saved.to_diff_dict(), "max_new_tokens": None, "max_length": 8})
    try:
        model.save_pretrained(folder)
    finally:
        model.generation_config = saved
    tokenizer.save_pretrained(folder)
    warned = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    generation_logger = logging.getLogger("transformers.generation.utils")
    generation_logger.addHandler(handler)
    try:
        translate = pipeline(PIPELINE_TASK, model=str(folder))
        texts = SENTENCES[:3]
        seven = [row["translation_text"] for row in translate(texts)]  # the saved max_length 8: 7 new tokens
        three = [row["translation_text"] for row in translate(texts, max_new_tokens=3)]
        predictor = Predictor.from_pretrained(folder)
        assert predictor.translate(texts) == seven and predictor.translate(texts, max_new_tokens=3) == three
    finally:
        generation_logger.removeHandler(handler)
    assert seven == one_by_one(model, tokenizer, texts, max_new_tokens=7) != three
    assert three == one_by_one(model, tokenizer, texts, max_new_tokens=3)
    assert not [message for message in warned if "seem to have been set" in message], warned


def test_quantize_dynamic_quantizes_every_projection_and_generate_runs(translator, tokenizer):
    _, model = translator
    linear_layers = [name for name, module in model.named_modules() if type(module) is torch.nn.Linear]
    assert len(linear_layers) == 2 * 6 + 2 * 10 + 1  # 2 encoder and 2 decoder layers, the output projection
    quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    modules = dict(quantized.named_modules())
    assert all(type(modules[name]) is torch.ao.nn.quantized.dynamic.Linear for name in linear_layers)
    assert not any(type(m) is torch.nn.Linear for m in quantized.modules())

    batch = tokenizer(SENTENCES[:6], return_tensors="pt", padding=True, truncation=True, max_length=12)
    decoder_input_ids = torch.full((6, 4), model.config.decoder_start_token_id)
    with torch.no_grad():
        exact = model(**batch, decoder_input_ids=decoder_input_ids).logits
        approximate = quantized(**batch, decoder_input_ids=decoder_input_ids).logits
        generated = quantized.generate(**batch, num_beams=2, max_new_tokens=5)
    error = (approximate - exact).abs().max() / exact.abs().max()
    assert 0 < error < 0.05, error  # int8 weights: close, not equal
    assert generated.shape[0] == 6 and generated.shape[1] > 1
    # The quantized copy trains no fused loss from a weight it does not have, but computes the plain one.
    quantized.train()
    loss = quantized(**batch, labels=batch["input_ids"]).loss
    assert torch.isfinite(loss)


def test_a_quantize_dynamic_model_is_refused_by_save_pretrained_before_anything_is_written(translator, tmp_path):
    _, model = translator
    quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    with pytest.raises(ValueError, match=r"quantize_dynamic.*Save the float model and quantize after loading"):
        quantized.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists() or not any((tmp_path / "int8").iterdir())
    model.save_pretrained(tmp_path / "float")  # the float model it was made from still saves
    assert (tmp_path / "float" / "model.safetensors").is_file()


def test_ctranslate2_engine_gives_the_torch_translations(translator, tokenizer, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_transformer.export import to_ctranslate2

    folder, model = translator
    texts = SENTENCES[:8]
    torch_translations = Predictor.from_pretrained(folder, num_beams=1).translate(texts)
    converted = Predictor.from_pretrained(folder, engine="ctranslate2", num_beams=1)  # converted on the fly
    try:
        assert converted.translate(texts) == torch_translations
    finally:
        converted.close()
    exported = to_ctranslate2(folder, tmp_path / "ct2")
    predictor = Predictor.from_pretrained(exported, engine="ctranslate2", batch_size=3)
    assert predictor.translate(texts, num_beams=1) == torch_translations
    # Beam search stopping as generate(early_stopping=True) does: CTranslate2's own rule, the same translations.
    early = Predictor.from_pretrained(folder).translate(texts, num_beams=3, early_stopping=True)
    assert predictor.translate(texts, num_beams=3, early_stopping=True) == early
    with pytest.raises(
        ValueError, match="early_stopping must be True, False or 'never', got 'x'"
    ):  # it reaches the engine
        predictor.translate(texts, num_beams=3, early_stopping="x")
    # Several candidates per text: each text keeps its own, best first, as CTranslate2 gives them for the batch.
    results = predictor(texts, num_beams=3, num_return_sequences=2)

    def generate(input_ids, attention_mask):
        return predictor.ctranslate2_generator.generate(
            input_ids, attention_mask, num_beams=3, num_return_sequences=2, max_new_tokens=7
        )

    expected = candidates_batch_by_batch(tokenizer, texts, 3, 2, generate)
    assert [result["translations"] for result in results] == expected
    # A folder that saves two sequences per text: both engines give each text, blank ones too, two candidates.
    generation = json.loads((exported / "generation_config.json").read_text())
    (exported / "generation_config.json").write_text(json.dumps({**generation, "num_return_sequences": 2}))
    on_ct2 = Predictor.from_pretrained(exported, engine="ctranslate2")([*texts[:2], ""])
    assert [len(result["translations"]) for result in on_ct2] == [2, 2, 2]
    torch_folder = tmp_path / "two-sequences"
    model.generation_config.num_return_sequences = 2
    model.save_pretrained(torch_folder)
    tokenizer.save_pretrained(torch_folder)
    model.generation_config.num_return_sequences = 1
    on_torch = Predictor.from_pretrained(torch_folder)([*texts[:2], ""])
    assert [len(result["translations"]) for result in on_torch] == [2, 2, 2]
    with pytest.raises(ValueError, match="already a CTranslate2 model"):
        Predictor.from_pretrained(exported, engine="ctranslate2", quantization="int8")


def test_ctranslate2_engine_computes_in_the_type_asked_for(translator, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_transformer.export import to_ctranslate2

    folder, _ = translator
    exported = to_ctranslate2(folder, tmp_path / "ct2")  # float32 weights
    default = Predictor.from_pretrained(exported, engine="ctranslate2", num_beams=1)
    int8 = Predictor.from_pretrained(exported, engine="ctranslate2", compute_type="int8", num_beams=1)
    assert default.ctranslate2_generator.translator.compute_type == "float32"
    assert int8.ctranslate2_generator.translator.compute_type == "int8_float32"
    assert len(int8.translate(SENTENCES[:4])) == 4
    with pytest.raises(ValueError, match="Invalid compute type: flaot16"):
        Predictor.from_pretrained(exported, engine="ctranslate2", compute_type="flaot16")
    with pytest.raises(ValueError, match="compute_type applies to engine='ctranslate2'"):
        Predictor.from_pretrained(folder, compute_type="float16")
