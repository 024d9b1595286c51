"""ONNX export (hf_transformer.export.onnx_export) of tiny saved folders, and decoding over ONNX Runtime."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_config

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification  # noqa: E402
from hf_transformer.export.onnx_export import (  # noqa: E402
    OnnxClassifier,
    OnnxSeq2SeqGenerator,
    quantize_onnx,
    to_onnx,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "a man rides a red bike .",
    "two dogs play in the snow .",
    "ein mann fährt ein rotes fahrrad .",
    "a dog .",
] * 4
# Five inputs of five lengths: the graphs were traced on 3 unpadded rows, and checked on 2 rows.
TEXTS = [
    "a man rides a red bike in the snow .",
    "a dog .",
    "two dogs play .",
    "ein mann fährt ein rotes fahrrad .",
    "snow",
]
EOS = 3


@pytest.fixture(scope="module")
def tokenizer():
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)


@pytest.fixture(scope="module")
def batch(tokenizer):
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    assert len(set(batch["attention_mask"].sum(1).tolist())) == len(TEXTS)
    return batch


@pytest.fixture(scope="module")
def translator(tmp_path_factory, tokenizer):
    """(model, exported folder). Weights far from the default init: the argmax of each step is clear, the decoder
    follows its input tokens (small sub-layers beside unit embeddings), and EOS takes over, by a margin, a token
    that the model otherwise emits late: greedy and beam outputs stop at several lengths."""
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), n_layer=2, max_position_embeddings=48, tie_word_embeddings=False)
    model = TransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 1.0 if "embed" in name else 0.5 if "lm_head" in name else 0.1)
        model.lm_head.weight[EOS] = 1.3 * model.lm_head.weight[63]
    folder = tmp_path_factory.mktemp("translator")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, to_onnx(folder, tmp_path_factory.mktemp("translator-onnx"))


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=3, n_layer=1, max_position_embeddings=48)
    model = TransformerForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    folder = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, classifier_dir):
    return to_onnx(classifier_dir, tmp_path_factory.mktemp("classifier-onnx"))


def _shapes(path: Path) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return {node.name: node.shape for node in [*session.get_inputs(), *session.get_outputs()]}


def test_seq2seq_graphs_and_files(translator):
    _, folder = translator
    assert {"encoder.onnx", "decoder.onnx", "config.json", "generation_config.json", "tokenizer.json"} <= {
        file.name for file in folder.iterdir()
    }
    encoder, decoder = _shapes(folder / "encoder.onnx"), _shapes(folder / "decoder.onnx")
    assert list(encoder) == ["input_ids", "attention_mask", "encoder_hidden_states"] + [
        f"cross_{kind}_{i}" for i in range(2) for kind in ("key", "value")
    ]
    past = [f"past_{kind}_{i}" for i in range(2) for kind in ("key", "value")]
    assert list(decoder) == [
        "input_ids",
        "encoder_attention_mask",
        *past,
        *[f"cross_{n[5:]}" for n in past],
        "logits",
        *[f"present_{n[5:]}" for n in past],
    ]
    # Batch and lengths are named dimensions; heads (4), head size (8) and the vocabulary (79) are fixed.
    rows, source = encoder["input_ids"]
    assert isinstance(rows, str) and isinstance(source, str)
    assert encoder["cross_key_0"] == encoder["cross_value_1"] == [rows, 4, source, 8]
    rows, new = decoder["input_ids"]
    past = decoder["past_key_0"][2]
    assert all(isinstance(name, str) for name in (rows, new, past)) and len({rows, new, past}) == 3
    assert decoder["past_value_1"] == [rows, 4, past, 8] and decoder["logits"] == [rows, new, 79]
    assert decoder["cross_key_1"][:2] == [rows, 4] and decoder["present_key_0"][2] not in (past, new)


@pytest.mark.parametrize(
    "num_beams, settings",
    [
        (1, {}),
        (4, {}),
        (4, {"length_penalty": 0.5, "early_stopping": True}),
        (3, {"length_penalty": 2.0, "early_stopping": "never"}),
    ],
)
@pytest.mark.parametrize("workers", [1, 3])
def test_generation_matches_generate(translator, batch, num_beams, settings, workers):
    """Also with the batch split between workers (rows 2 + 2 + 1): their outputs are joined in input order and
    filled out to the longest as generate fills its finished rows."""
    model, folder = translator
    with torch.no_grad():
        expected = model.generate(**batch, num_beams=num_beams, max_new_tokens=12, **settings).numpy()
    generator = OnnxSeq2SeqGenerator(folder, intra_op_num_threads=1, workers=workers)
    got = generator.generate(
        batch["input_ids"].numpy(), batch["attention_mask"].numpy(), num_beams=num_beams, max_new_tokens=12, **settings
    )
    np.testing.assert_array_equal(got, expected)
    if not settings:  # the outputs test something: rows stop at several lengths, the shorter ones are filled
        stops = {row.tolist().index(EOS) if EOS in row else None for row in got}
        assert len(stops) >= 3


@pytest.mark.parametrize("position_type", ["learned", "sinusoidal"])
def test_generation_past_the_decoder_position_table_stops_where_generate_stops(
    tokenizer, batch, tmp_path, position_type
):
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer), n_layer=1, max_position_embeddings=48, decoder_max_position_embeddings=6,
        position_embedding_type=position_type,
    )  # fmt: skip
    model = TransformerForConditionalGeneration(config).eval()
    with torch.no_grad():  # as the translator fixture's: the argmax of each step is clear
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 1.0 if "embed" in name else 0.1)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    generator = OnnxSeq2SeqGenerator(to_onnx(tmp_path / "model", tmp_path / "onnx"))
    told = "`max_new_tokens`=10 goes past the decoder's position table of 6 positions"
    for num_beams in (1, 3):
        settings = dict(num_beams=num_beams, max_new_tokens=10, min_new_tokens=10)
        with pytest.warns(UserWarning, match=told), torch.no_grad():
            expected = model.generate(**batch, **settings).numpy()
        with pytest.warns(UserWarning, match=told):
            got = generator.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), **settings)
        assert expected.shape == (5, 7)  # the start token and the 6 the table holds
        np.testing.assert_array_equal(got, expected)


def test_generation_defaults_come_from_the_generation_config(translator, batch):
    model, folder = translator
    generator = OnnxSeq2SeqGenerator.for_cpu(folder, 2)
    assert generator.workers == 2
    generator.max_new_tokens, generator.num_beams = 5, 2
    with torch.no_grad():
        expected = model.generate(**batch, num_beams=2, max_new_tokens=5).numpy()
    np.testing.assert_array_equal(
        generator.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy()), expected
    )


def test_bad_ids_and_settings_are_refused_and_a_folder_without_lengths_generates_generate_s_20(translator, tmp_path):
    model, folder = translator
    generator = OnnxSeq2SeqGenerator(folder)
    for bad in (-1, model.config.vocab_size):  # a Gather would read -1 as the last token
        with pytest.raises(ValueError, match=f"Token id {bad} is outside the vocabulary"):
            generator.generate(np.array([[5, bad, 2]]), max_new_tokens=2)
    for options, named in (({"num_beams": 0}, "num_beams"), ({"max_new_tokens": 0}, "max_new_tokens")):
        with pytest.raises(ValueError, match=f"`{named}` must be an integer of at least 1, got 0"):
            generator.generate(np.array([[5, 6, 2]]), **options)
    with pytest.raises(ValueError, match="early_stopping must be"):
        generator.generate(np.array([[5, 6, 2]]), early_stopping="sometimes")
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, length\)"):
        generator.generate(np.zeros((0, 3), dtype=np.int64))
    # The exported generation config names no length: generate gives 20 new tokens.
    assert generator.max_new_tokens == 20


def test_classifier_matches_torch_on_padded_rows(classifier_dir, classifier, batch):
    assert {"classifier.onnx", "config.json", "tokenizer.json"} <= {file.name for file in classifier.iterdir()}
    model = TransformerForSequenceClassification.from_pretrained(classifier_dir).eval()
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    onnx_classifier = OnnxClassifier(classifier, intra_op_num_threads=1)
    logits = onnx_classifier(batch["input_ids"].numpy(), batch["attention_mask"].numpy())
    assert logits.shape == (len(TEXTS), 3)
    assert np.abs(logits - expected).max() <= 1e-4
    # The padding is masked: a padded row gives its unpadded logits.
    length = int(batch["attention_mask"][1].sum())
    alone = onnx_classifier(batch["input_ids"][1:2, :length].numpy())
    assert np.abs(alone - logits[1:2]).max() <= 1e-4
    assert onnx_classifier.labels(batch["input_ids"].numpy()) == [model.config.id2label[i] for i in expected.argmax(-1)]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_left_padded_batch_gives_the_right_padded_results(translator, classifier, batch, num_beams):
    # The exported encoder numbers each row's real tokens from its first one, as the model does.
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    padding_first = np.argsort(mask, axis=1, kind="stable")  # each row's padding, then its tokens in order
    left_ids, left_mask = np.take_along_axis(ids, padding_first, 1), np.take_along_axis(mask, padding_first, 1)
    assert not np.array_equal(left_mask, mask)
    generator = OnnxSeq2SeqGenerator(translator[1], intra_op_num_threads=1)
    expected = generator.generate(ids, mask, num_beams=num_beams, max_new_tokens=12)
    np.testing.assert_array_equal(
        generator.generate(left_ids, left_mask, num_beams=num_beams, max_new_tokens=12), expected
    )
    onnx_classifier = OnnxClassifier(classifier, intra_op_num_threads=1)
    assert np.abs(onnx_classifier(left_ids, left_mask) - onnx_classifier(ids, mask)).max() <= 1e-4


def test_a_regression_head_exports_its_values_and_has_no_labels(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = TransformerForSequenceClassification(
        tiny_config(
            vocab_size=len(tokenizer), num_labels=1, problem_type="regression", n_layer=1, max_position_embeddings=48
        )
    ).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    exported = OnnxClassifier(to_onnx(tmp_path / "model", tmp_path / "onnx"), intra_op_num_threads=1)
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    assert np.abs(exported(batch["input_ids"].numpy(), batch["attention_mask"].numpy()) - expected).max() <= 1e-4
    with pytest.raises(ValueError, match="regression head gives values, not labels"):
        exported.labels(batch["input_ids"].numpy())  # an argmax over one value would name label 0 for every text


def test_command_line(classifier_dir, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    output = tmp_path / "exported"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "hf_transformer.export",
            "onnx",
            str(classifier_dir),
            str(output),
            "--quantization",
            "int8",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().splitlines()[-1] == str(output)
    assert (output / "classifier.onnx").is_file() and (output / "config.json").is_file()
    assert _op_count(output / "classifier.onnx", "MatMulInteger") > 0
    logits = OnnxClassifier(output)(np.array([[5, 6, 7, 8]]))
    assert logits.shape == (1, 3) and np.isfinite(logits).all()


def test_an_export_over_an_earlier_one_leaves_none_of_its_graphs(translator, classifier_dir, tmp_path):
    import shutil

    _, translator_export = translator
    folder = shutil.copytree(translator_export, tmp_path / "export")
    to_onnx(classifier_dir, folder, force=True)  # a classifier over a translator's graphs
    names = {path.name for path in folder.iterdir()}
    assert "classifier.onnx" in names and not names & {"encoder.onnx", "decoder.onnx", "generation_config.json"}
    with pytest.raises(FileExistsError, match="already holds files"):
        quantize_onnx(translator_export, folder)  # never mixed into another export


def test_the_command_refuses_a_folder_without_weights_in_one_line(classifier_dir, tmp_path, capsys):
    from hf_transformer.export.__main__ import main as export_main

    folder = tmp_path / "config-only"  # an export's folder, say: a config.json and no weights
    folder.mkdir()
    (folder / "config.json").write_text((classifier_dir / "config.json").read_text())
    with pytest.raises(SystemExit) as stopped:
        export_main(["onnx", str(folder), str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and "model.safetensors" in error.splitlines()[-1] and "Traceback" not in error


def test_inputs_longer_than_the_position_table_are_refused_as_the_model_refuses_them(translator, classifier):
    # 48 positions: 49 tokens would fail inside ONNX Runtime's embedding Gather; the model's own message instead.
    model, folder = translator
    too_long = np.full((2, 49), 5, dtype=np.int64)
    message = "Sequence length 49 exceeds the position table of 48 positions"
    with pytest.raises(ValueError, match=message):
        model(input_ids=torch.from_numpy(too_long), decoder_input_ids=torch.tensor([[2], [2]]))
    with pytest.raises(ValueError, match=message):
        OnnxSeq2SeqGenerator(folder).generate(too_long, max_new_tokens=2)
    with pytest.raises(ValueError, match=message):
        OnnxClassifier(classifier)(too_long)
    assert OnnxClassifier(classifier)(too_long[:, :48]).shape == (2, 3)


def test_output_folders_that_would_lose_files_are_refused(classifier_dir, tmp_path, capsys):
    from hf_transformer.export.__main__ import main

    with pytest.raises(ValueError, match="would replace the model folder"):
        to_onnx(classifier_dir, classifier_dir)
    (tmp_path / "no-model").mkdir()
    with pytest.raises(FileNotFoundError, match="is not a model folder: it has no config.json"):
        to_onnx(tmp_path / "no-model", tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("kept")
    with pytest.raises(FileExistsError, match="already holds files; pass force=True"):
        to_onnx(classifier_dir, taken)
    assert to_onnx(classifier_dir, taken, force=True) == taken and (taken / "classifier.onnx").is_file()
    other = tmp_path / "other-model"  # another saved model: its config and tokenizer would be replaced
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((classifier_dir / name).read_bytes())
    with pytest.raises(ValueError, match=r"holds a saved model \(model.safetensors\)"):
        to_onnx(classifier_dir, other, force=True)
    assert sorted(path.name for path in other.iterdir()) == ["config.json", "model.safetensors"]
    # The command line says what is wrong in one line, without a traceback.
    for folder in (str(tmp_path / "no-model"), str(classifier_dir)):
        with pytest.raises(SystemExit) as raised:
            main(["onnx", folder, str(taken)])
        assert raised.value.code == 2
        error = capsys.readouterr().err
        assert "error: " in error and "Traceback" not in error and ("config.json" in error or "--force" in error)


@pytest.mark.parametrize("rounding", [None, 1, 0])
def test_top_k_is_a_stable_sort_prefix(rounding):
    """The beam search's top-k (partial selection, then a sort of the kept few) picks the entries a stable full sort
    would, equal scores in index order, also when ties straddle the cut (rounded scores tie often)."""
    from hf_transformer.export.onnx_export import _top

    scores = np.random.default_rng(0).standard_normal((16, 4 * 300)).astype(np.float32)
    if rounding is not None:
        scores = np.round(scores, rounding)
    scores[3, :] = -1e9  # a whole row tied (a beam that may not extend)
    for k in (1, 4, 8):
        np.testing.assert_array_equal(_top(scores, k), np.argsort(-scores, axis=1, kind="stable")[:, :k])


def _op_count(path: Path, op_type: str) -> int:
    import onnx

    return sum(node.op_type == op_type for node in onnx.load(str(path)).graph.node)


def _integer_matmul_weight_range(path: Path) -> tuple[int, int]:
    """The smallest and largest stored value of the int8 weights that the graph's MatMulInteger nodes multiply by."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    weights = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    values = [weights[node.input[1]] for node in graph.node if node.op_type == "MatMulInteger"]
    assert values and all(value.dtype == np.int8 for value in values)
    return min(int(value.min()) for value in values), max(int(value.max()) for value in values)


def test_int8_export_quantizes_the_projections_and_decodes(translator, batch, tmp_path):
    """quantization="int8": ONNX Runtime's dynamic quantization turns the projections of both graphs into integer
    matmuls, and the decoder over them keeps the fp32 graphs' tokens on this clear-margin model."""
    model, fp32_folder = translator
    model.save_pretrained(tmp_path / "model")
    for file in fp32_folder.glob("tokenizer*"):
        (tmp_path / "model" / file.name).write_bytes(file.read_bytes())
    folder = to_onnx(tmp_path / "model", tmp_path / "int8", quantization="int8")
    # Encoder: 2 layers x 6 projections and the decoder layers' cross keys/values; decoder: 2 layers x 8 and lm_head.
    assert _op_count(folder / "encoder.onnx", "MatMulInteger") == 16
    assert _op_count(folder / "decoder.onnx", "MatMulInteger") == 17
    assert _op_count(fp32_folder / "decoder.onnx", "MatMulInteger") == 0
    assert not list(folder.glob("*.int8.onnx"))
    # 7-bit weights: ONNX Runtime multiplies uint8 activations by int8 weights in pairs summed into int16 on CPUs
    # without VNNI (AVX2), which saturates with full 8-bit weights (255 * 127 * 2 > 32767) and changes the tokens.
    for graph in ("encoder.onnx", "decoder.onnx"):
        low, high = _integer_matmul_weight_range(folder / graph)
        assert -64 <= low and high <= 64 and high - low > 64, (graph, low, high)
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    for num_beams in (1, 4):
        expected = OnnxSeq2SeqGenerator(fp32_folder).generate(ids, mask, num_beams=num_beams, max_new_tokens=12)
        got = OnnxSeq2SeqGenerator(folder).generate(ids, mask, num_beams=num_beams, max_new_tokens=12)
        assert got.shape[0] == expected.shape[0] and (got[:, 0] == expected[:, 0]).all()
        same = [list(a[a != EOS]) == list(b[b != EOS]) for a, b in zip(expected, got)]
        assert sum(same) >= len(same) - 1, (num_beams, expected, got)


def test_a_quantization_that_fails_on_one_graph_leaves_no_folder_of_mixed_graphs(translator, tmp_path, monkeypatch):
    """The decoder's quantization failing after the encoder's: in place, both float32 graphs stay as they were; into
    a new folder, nothing is left; from to_onnx, the float32 export stays whole and the error says so."""
    from hf_transformer.export import onnx_export, quantize_onnx

    model, fp32_folder = translator
    quantize_int8 = onnx_export._quantize_int8

    def failing_on_the_decoder(path):
        quantized = quantize_int8(path)
        if path.name == "decoder.onnx":
            raise RuntimeError("the quantizer broke")
        return quantized

    monkeypatch.setattr(onnx_export, "_quantize_int8", failing_on_the_decoder)
    in_place = tmp_path / "in-place"
    in_place.mkdir()
    for file in fp32_folder.iterdir():
        (in_place / file.name).write_bytes(file.read_bytes())
    with pytest.raises(RuntimeError, match="the quantizer broke"):
        quantize_onnx(in_place, in_place)
    assert sorted(path.name for path in in_place.iterdir()) == sorted(path.name for path in fp32_folder.iterdir())
    for graph in ("encoder.onnx", "decoder.onnx"):
        assert (in_place / graph).read_bytes() == (fp32_folder / graph).read_bytes()
    with pytest.raises(RuntimeError, match="the quantizer broke"):
        quantize_onnx(fp32_folder, tmp_path / "int8")
    assert not (tmp_path / "int8").exists()

    model.save_pretrained(tmp_path / "model")
    for file in fp32_folder.glob("tokenizer*"):
        (tmp_path / "model" / file.name).write_bytes(file.read_bytes())
    told = r"holds the float32 export, but its int8 quantization failed \(RuntimeError: the quantizer broke\)"
    with pytest.raises(RuntimeError, match=told):
        to_onnx(tmp_path / "model", tmp_path / "export", quantization="int8")
    assert not list((tmp_path / "export").glob("*.int8.onnx"))
    for graph in ("encoder.onnx", "decoder.onnx"):
        assert _op_count(tmp_path / "export" / graph, "MatMulInteger") == 0


def test_without_onnx_runtime_the_export_says_what_to_install_and_writes_nothing(classifier_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as where it is not installed
    with pytest.raises(ImportError, match=r'ONNX export needs onnx and onnxruntime .*pip install -e "\.\[export\]"'):
        to_onnx(classifier_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unknown_quantization_is_refused(classifier_dir, tmp_path):
    with pytest.raises(ValueError, match="quantization='int4'"):
        to_onnx(classifier_dir, tmp_path / "out", quantization="int4")
    assert not (tmp_path / "out").exists()


def test_int8_of_a_model_with_external_weights_is_refused(classifier_dir, tmp_path, monkeypatch):
    from hf_transformer.export import onnx_export

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 1000)  # as if the model were over 1 GiB
    with pytest.raises(ValueError, match="external data"):
        to_onnx(classifier_dir, tmp_path / "out", quantization="int8")


def test_quantize_onnx_of_an_exported_folder(classifier_dir, classifier, batch, tmp_path):
    """quantize_onnx quantizes a to_onnx folder into another, leaving the float32 folder as it was, or in place; the
    int8 classifier keeps the float32 graph's labels on this clear-margin model."""
    from hf_transformer.export import quantize_onnx

    before = (classifier / "classifier.onnx").read_bytes()
    folder = quantize_onnx(classifier, tmp_path / "int8")
    assert (classifier / "classifier.onnx").read_bytes() == before
    assert _op_count(classifier / "classifier.onnx", "MatMulInteger") == 0
    assert _op_count(folder / "classifier.onnx", "MatMulInteger") == 7  # 1 layer x (q, k, v, o, 2 feed-forward) + head
    assert {file.name for file in classifier.iterdir()} == {file.name for file in folder.iterdir()}
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    expected = OnnxClassifier(classifier)(ids, mask)
    got = OnnxClassifier(folder)(ids, mask)
    assert (got.argmax(-1) == expected.argmax(-1)).all()
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()

    in_place = tmp_path / "in-place"
    in_place.mkdir()
    for file in classifier.iterdir():
        (in_place / file.name).write_bytes(file.read_bytes())
    assert quantize_onnx(in_place, in_place) == in_place
    assert _op_count(in_place / "classifier.onnx", "MatMulInteger") == 7
    assert not list(in_place.glob("*.int8.onnx"))


def test_quantize_onnx_refuses_what_it_cannot_quantize(classifier, classifier_dir, tmp_path):
    from hf_transformer.export import quantize_onnx

    with pytest.raises(ValueError, match="quantization='int4'"):
        quantize_onnx(classifier, tmp_path / "out", quantization="int4")
    with pytest.raises(FileNotFoundError, match="classifier.onnx"):
        quantize_onnx(classifier_dir, tmp_path / "out")  # a model folder, not an export
    external = tmp_path / "external"
    external.mkdir()
    (external / "classifier.onnx").write_bytes((classifier / "classifier.onnx").read_bytes())
    (external / "classifier.onnx.data").write_bytes(b"\0")
    with pytest.raises(ValueError, match="external data"):
        quantize_onnx(external, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("head", ["seq2seq", "classifier"])
def test_legacy_torchscript_export_loads_and_matches_eager_on_padded_batches(
    translator, classifier_dir, tokenizer, tmp_path, head
):
    """torch's legacy (TorchScript) exporter, beside the dynamo one of ``to_onnx``: ``dynamo=False`` with
    ``dynamic_axes`` writes a graph ONNX Runtime loads (the positions of real tokens are a cumulative sum of integers,
    never of booleans, which ONNX's CumSum refuses), and it matches eager on a padded batch of another shape than the
    traced one."""
    import onnxruntime

    if head == "seq2seq":
        model, names = translator[0], ["input_ids", "attention_mask", "decoder_input_ids"]

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask, decoder_input_ids):
                return self.m(
                    input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                    use_cache=False,
                ).logits  # fmt: skip
    else:
        model = TransformerForSequenceClassification.from_pretrained(classifier_dir).eval()
        names = ["input_ids", "attention_mask"]

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).logits

    def inputs(texts):
        encoded = tokenizer(texts, return_tensors="pt", padding=True)
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        assert not mask.all()  # padded
        # The target: each source row's first tokens, padded where its source is (a padded decoder batch too).
        return (ids, mask, ids[:, :4].masked_fill(mask[:, :4] == 0, 0)) if head == "seq2seq" else (ids, mask)

    wrapper, path = Wrapper().eval(), tmp_path / "legacy.onnx"
    axes = {name: {0: "batch", 1: f"{name}_length"} for name in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it fixes in the graph
        torch.onnx.export(
            wrapper, inputs(TEXTS[:3]), str(path), dynamo=False, opset_version=17, input_names=names,
            output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
        )  # fmt: skip
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    checked = inputs(TEXTS[1:])  # 4 rows of other lengths than the 3 traced
    with torch.no_grad():
        expected = wrapper(*checked).numpy()
    (got,) = session.run(["logits"], {name: tensor.numpy() for name, tensor in zip(names, checked)})
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-4


def test_generation_settings_the_decoder_does_not_apply_are_warned_about(translator, tmp_path):
    """An exported folder whose generation config sets what OnnxSeq2SeqGenerator does not apply (generate would) is
    warned about when the generator is built, naming each; the fixture's folder, without them, is not."""
    import json
    import shutil

    folder = translator[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OnnxSeq2SeqGenerator(folder)
    copy = shutil.copytree(folder, tmp_path / "with-settings")
    settings = json.loads((copy / "generation_config.json").read_text())
    settings.update(no_repeat_ngram_size=2, repetition_penalty=1.3, bad_words_ids=[[5]], num_beams=2)
    (copy / "generation_config.json").write_text(json.dumps(settings))
    told = r"ignores the generation settings \['bad_words_ids', 'no_repeat_ngram_size', 'repetition_penalty'\]"
    with pytest.warns(UserWarning, match=told):
        OnnxSeq2SeqGenerator(copy)
