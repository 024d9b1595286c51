"""hf_transformer.export.ctranslate2_export: tiny random seq2seq folders converted to CTranslate2 decode the tokens
that ``model.generate`` decodes, with the same log-probabilities."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_transformer import TransformerForSequenceClassification
from tests.helpers.models import hf_tokens, random_translator, teacher_forced_log_probs, tiny_config

ctranslate2 = pytest.importorskip("ctranslate2")

from hf_transformer.export.ctranslate2_export import (  # noqa: E402
    PATIENCE_FOR_HEURISTIC_STOPPING,
    CTranslate2Generator,
    check_convertible,
    ctranslate2_generate,
    int8_products_saturate,
    prefer_avx512,
    read_model_bin,
    to_ctranslate2,
)

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 4
# Inputs of different lengths, right-padded in one batch.
INPUTS = ["a man rides a red bike .", "two dogs", "ein mann fährt ein rotes fahrrad .", "a dog in the snow"]
MAX_NEW_TOKENS = 10


@pytest.fixture(scope="module")
def tokenizer():
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)


def save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


CASES = {
    "post_ln_sinusoidal_gelu": {},
    "post_ln_final_layer_norm": dict(final_layer_norm=True),
    "pre_ln_learned_relu": dict(
        layer_norm_position="pre", position_embedding_type="learned", activation_function="relu"
    ),
    "pre_ln_without_final_norm": dict(layer_norm_position="pre", final_layer_norm=False),
    "embedding_layer_norm_scaled": dict(embedding_layer_norm=True, scale_embedding=True, layer_norm_epsilon=1e-5),
    "head_dim_not_d_model_over_heads": dict(head_dim=12, n_layer=1),
    "separate_vocabularies": dict(share_embeddings=False, decoder_vocab_size=90, encoder_layers=1),
    "larger_vocabulary_untied_output": dict(vocab_size=84, tie_word_embeddings=False, layer_norm_epsilon=0.3),
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory, tokenizer):
    """case name -> (model, CTranslate2 folder), converted once per case."""
    cache = {}

    def get(case: str):
        if case not in cache:
            model = random_translator(tokenizer, **CASES[case])
            folder = save(model, tokenizer, tmp_path_factory.mktemp(case))
            cache[case] = (model, to_ctranslate2(folder, folder.parent / f"{case}-ct2"))
        return cache[case]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_ctranslate2_decodes_what_generate_decodes(converted, tokenizer, case, num_beams):
    model, output_dir = converted(case)
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    assert not batch["attention_mask"].all(), "the batch should hold padding"
    # With patience 1, CTranslate2 stops beam search once num_beams hypotheses have finished: HF's early_stopping=True.
    expected, expected_scores = hf_tokens(model, batch, num_beams=num_beams, early_stopping=True)
    assert len({tuple(row) for row in expected}) > 1, "a degenerate model: every input gives the same output"

    generator = CTranslate2Generator(output_dir)
    tokens, scores = generator.generate(
        batch["input_ids"],
        batch["attention_mask"],
        num_beams=num_beams,
        max_new_tokens=MAX_NEW_TOKENS,
        early_stopping=True,
        return_scores=True,
    )
    assert tokens == expected
    if num_beams > 1:
        torch.testing.assert_close(torch.tensor(scores), expected_scores, rtol=1e-4, atol=1e-4)

    # The log-probabilities of those tokens (and of the end token after them), step by step.
    sources = generator._source_tokens(batch["input_ids"], batch["attention_mask"])
    targets = [[generator.target_tokens[i] for i in row if i != model.config.eos_token_id] for row in tokens]
    results = generator.translator.score_batch(sources, targets, max_input_length=0)
    for result, reference in zip(results, teacher_forced_log_probs(model, batch, tokens)):
        torch.testing.assert_close(torch.tensor(result.log_probs), reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["post_ln_sinusoidal_gelu", "pre_ln_learned_relu", "separate_vocabularies"])
def test_score_gives_the_models_teacher_forced_log_probs(converted, tokenizer, case, threads):
    """generator.score: per input, each label token's log-probability, the end token's last, as the model gives
    them; labels with or without their end token score alike; workers keep the input order."""
    model, output_dir = converted(case)
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    eos = model.config.eos_token_id
    # Targets that are not the model's own output: other inputs' tokens, cut to different lengths.
    others = tokenizer(INPUTS[::-1], add_special_tokens=False)["input_ids"]
    labels = [row[: 2 + index] + [eos] for index, row in enumerate(others)]
    generator = CTranslate2Generator.for_cpu(output_dir, threads)
    scored = generator.score(batch["input_ids"], batch["attention_mask"], labels)
    references = teacher_forced_log_probs(model, batch, labels)
    assert [len(row) for row in scored] == [len(row) for row in labels]
    for row, reference in zip(scored, references):
        torch.testing.assert_close(torch.tensor(row), reference, rtol=1e-4, atol=1e-4)
    without_end = generator.score(batch["input_ids"], batch["attention_mask"], [row[:-1] for row in labels])
    torch.testing.assert_close(torch.tensor(sum(without_end, [])), torch.tensor(sum(scored, [])), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="4 inputs but 3 label sequences"):
        generator.score(batch["input_ids"], batch["attention_mask"], labels[:3])
    with pytest.raises(ValueError, match="exceeds the position table of 48 positions"):
        generator.score(batch["input_ids"], batch["attention_mask"], [[5] * 48] * 4)


@pytest.mark.parametrize("case", ["post_ln_sinusoidal_gelu", "pre_ln_learned_relu"])
def test_generation_past_the_decoder_position_table_stops_where_generate_stops(tmp_path, tokenizer, case):
    model = random_translator(tokenizer, **CASES[case], decoder_max_position_embeddings=6)
    generator = CTranslate2Generator(to_ctranslate2(save(model, tokenizer, tmp_path / "model"), tmp_path / "ct2"))
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    told = "`max_new_tokens`=10 goes past the decoder's position table of 6 positions"
    for num_beams in (1, 4):
        settings = dict(num_beams=num_beams, max_new_tokens=10, min_new_tokens=10)
        with pytest.warns(UserWarning, match=told), torch.no_grad():
            expected = model.generate(**batch, **settings, early_stopping=True)
        with pytest.warns(UserWarning, match=told):
            tokens = generator.generate(batch["input_ids"], batch["attention_mask"], **settings, early_stopping=True)
        assert expected.shape == (4, 7)  # the start token and the 6 the table holds
        assert tokens == expected[:, 1:].tolist()


def test_inputs_longer_than_the_position_table_are_refused_as_the_model_refuses_them(converted):
    model, output_dir = converted("post_ln_sinusoidal_gelu")  # 48 positions
    generator = CTranslate2Generator(output_dir)
    with pytest.raises(ValueError, match="Sequence length 49 exceeds the position table of 48 positions"):
        generator.generate([[5] * 49], max_new_tokens=2)
    assert len(generator.generate([[5] * 48], max_new_tokens=2)) == 1


def test_what_generate_refuses_is_refused_and_a_folder_without_lengths_generates_generate_s_20(converted):
    model, output_dir = converted("post_ln_sinusoidal_gelu")
    generator = CTranslate2Generator(output_dir)
    # More sequences than beams: CTranslate2 would give some inputs more hypotheses than others, and a flat list
    # would hand a text its neighbour's.
    with pytest.raises(ValueError, match=r"`num_return_sequences` \(6\) must be at least 1 and at most `num_beams`"):
        generator.generate([[5, 6, 2]], num_beams=4, num_return_sequences=6)
    for option, value, told in (
        ("num_beams", 0, "`num_beams` must be an integer of at least 1, got 0"),
        ("num_beams", 2.5, "`num_beams` must be an integer of at least 1, got 2.5"),
        ("min_new_tokens", -3, "`min_new_tokens` must be an integer of at least 0, got -3"),
        ("max_new_tokens", True, "`max_new_tokens` must be an integer of at least 1, got True"),
        ("num_return_sequences", 0, "`num_return_sequences` must be an integer of at least 1, got 0"),
        ("length_penalty", "x", "`length_penalty` must be a number, got 'x'"),
    ):  # generate's words, not CTranslate2's bindings' (or a rounded number of beams)
        with pytest.raises(ValueError, match=re.escape(told)):
            generator.generate([[5, 6, 2]], **{option: value})
    for bad in (-1, model.config.vocab_size):  # a list index would read -1 as the last token
        with pytest.raises(ValueError, match=f"Token id {bad} is outside the vocabulary"):
            generator.generate([[5, bad, 2]], max_new_tokens=2)
        with pytest.raises(ValueError, match=f"Token id {bad} is outside the vocabulary"):
            generator.score([[5, 6, 2]], None, [[7, bad]])
    # The saved generation config names no length: generate gives 20 new tokens (21 with the start token).
    assert "max_length" not in generator.generation_config and "max_new_tokens" not in generator.generation_config
    ids = torch.tensor([[5, 6, 7, 2]])
    with torch.no_grad():
        expected = model.generate(ids, num_beams=1, eos_token_id=None, min_new_tokens=20)  # runs to its limit
    assert expected.shape[1] == 21
    assert len(generator.generate(ids, num_beams=1, min_new_tokens=20)[0]) == 20


@pytest.mark.parametrize("named_in", ["generation config", "model config"])
def test_every_end_token_ends_a_translation(converted, tokenizer, tmp_path, named_in):
    # As generate stops at any of its end tokens: each translation is the one-end-token translation of the same
    # engine cut after the first of them (the same computation up to there, on any CPU). The end tokens are named in
    # the exported folder's generation config, or in the model's config.json before the export (a list, as
    # transformers' configs allow), whose first is CTranslate2's end token.
    import shutil

    model, folder = converted("post_ln_sinusoidal_gelu")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    options = dict(num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    plain = CTranslate2Generator(folder).generate(batch["input_ids"], batch["attention_mask"], **options)
    eos = model.config.eos_token_id
    second_end = next(row[1] for row in plain if len(row) > 2 and row[1] != eos)  # a token a translation goes through
    if named_in == "generation config":
        two_ends = shutil.copytree(folder, tmp_path / "two-ends")
        settings = json.loads((two_ends / "generation_config.json").read_text())
        (two_ends / "generation_config.json").write_text(json.dumps(settings | {"eos_token_id": [eos, second_end]}))
    else:
        model.config.eos_token_id = model.generation_config.eos_token_id = [eos, second_end]
        try:
            two_ends = to_ctranslate2(save(model, tokenizer, tmp_path / "two-ends"), tmp_path / "two-ends-ct2")
        finally:
            model.config.eos_token_id = model.generation_config.eos_token_id = eos
        assert json.loads((two_ends / "config.json").read_text())["eos_token"] == tokenizer.convert_ids_to_tokens(eos)
    produced = CTranslate2Generator(two_ends).generate(batch["input_ids"], batch["attention_mask"], **options)
    expected = [row[: row.index(second_end) + 1] if second_end in row else row for row in plain]
    assert produced == expected and any(row[-1] == second_end for row in produced)


def test_vocabularies_map_token_strings_to_model_ids(converted, tokenizer):
    _, shared = converted("post_ln_sinusoidal_gelu")
    vocabulary = json.loads((shared / "shared_vocabulary.json").read_text())
    assert vocabulary[: len(tokenizer)] == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert (shared / "tokenizer.json").is_file() and (shared / "generation_config.json").is_file()

    _, separate = converted("separate_vocabularies")
    source = json.loads((separate / "source_vocabulary.json").read_text())
    target = json.loads((separate / "target_vocabulary.json").read_text())
    assert len(source) == len(tokenizer) and len(target) == 90
    assert target[: len(source)] == source and target[-1] == "<ct2_unused_89>"


def test_beam_search_with_end_tokens_and_length_penalties(tmp_path, tokenizer):
    model = random_translator(
        tokenizer,
        **CASES["pre_ln_learned_relu"],
        n_layer=1,
        head_dim=12,
        scale_embedding=True,
        embedding_layer_norm=True,
        tie_word_embeddings=False,
    )
    output_dir = to_ctranslate2(save(model, tokenizer, tmp_path / "model"), tmp_path / "ct2")
    generator = CTranslate2Generator(output_dir)
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    eos = model.config.eos_token_id
    for length_penalty in (0.0, 1.0, 2.0):
        expected, expected_scores = hf_tokens(
            model, batch, num_beams=4, early_stopping=True, length_penalty=length_penalty
        )
        tokens, scores = generator.generate(
            batch["input_ids"],
            batch["attention_mask"],
            num_beams=4,
            max_new_tokens=MAX_NEW_TOKENS,
            length_penalty=length_penalty,
            early_stopping=True,
            return_scores=True,
        )
        assert any(row[-1] == eos for row in expected), "this model should finish some beams"
        assert tokens == expected, length_penalty
        torch.testing.assert_close(torch.tensor(scores), expected_scores, rtol=1e-4, atol=1e-4)


class RecordingTranslator:
    """A ``ctranslate2.Translator`` that records the options of each ``translate_batch`` call."""

    def __init__(self, translator):
        self.translator, self.calls = translator, []

    def translate_batch(self, source, **options):
        self.calls.append(options)
        return self.translator.translate_batch(source, **options)


def test_early_stopping_chooses_ctranslate2s_patience(tmp_path, tokenizer):
    """True: patience 1, generate's own rule (tested above); False (generate's default, and the folder's unless it
    says otherwise) and "never": the patience that comes closest; anything else is refused."""
    model = random_translator(tokenizer, **CASES["post_ln_sinusoidal_gelu"])
    folder = save(model, tokenizer, tmp_path / "model")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)

    def patience_of(generator, **options):
        generator.translator = RecordingTranslator(generator.translator)
        generator.generate(batch["input_ids"], batch["attention_mask"], num_beams=4, max_new_tokens=8, **options)
        return generator.translator.calls[-1]["patience"]

    generator = CTranslate2Generator(to_ctranslate2(folder, tmp_path / "ct2"))
    assert generator.generation_config.get("early_stopping", False) is False
    assert patience_of(generator) == PATIENCE_FOR_HEURISTIC_STOPPING > 1
    assert patience_of(generator, early_stopping=True) == 1
    assert patience_of(generator, early_stopping="never") == PATIENCE_FOR_HEURISTIC_STOPPING
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never', got 'sometimes'"):
        generator.generate(batch["input_ids"], num_beams=4, max_new_tokens=8, early_stopping="sometimes")

    model.generation_config.update(num_beams=4, early_stopping=True)  # a folder asking for the early stop gets it
    folder = save(model, tokenizer, tmp_path / "early")
    assert patience_of(CTranslate2Generator(to_ctranslate2(folder, tmp_path / "early-ct2"))) == 1


@pytest.mark.parametrize("threads", [2, 3])
def test_workers_decode_parts_of_the_batch_in_input_order(converted, tokenizer, threads):
    """for_cpu(threads): that many one-thread workers, each batch split between them; the tokens are generate's,
    in input order, for greedy and beam search."""
    model, output_dir = converted("post_ln_sinusoidal_gelu")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    generator = CTranslate2Generator.for_cpu(output_dir, threads)
    assert generator.translator.num_translators == threads

    generator.translator = RecordingTranslator(generator.translator)
    for num_beams in (1, 4):
        expected, _ = hf_tokens(model, batch, num_beams=num_beams, early_stopping=True)
        tokens = generator.generate(
            batch["input_ids"],
            batch["attention_mask"],
            num_beams=num_beams,
            max_new_tokens=MAX_NEW_TOKENS,
            early_stopping=True,
        )
        assert tokens == expected
    batch_sizes = [call["max_batch_size"] for call in generator.translator.calls]  # each batch split at
    assert batch_sizes == [-(-len(INPUTS) // threads)] * 2


def test_a_generator_leaves_the_process_torch_threads_as_they_were(converted, tokenizer):
    """CTranslate2 sets the calling thread's OpenMP thread count to its intra_threads, which torch shares: building
    one-thread workers and decoding with them must not leave the caller's torch on one thread."""
    _, output_dir = converted("post_ln_sinusoidal_gelu")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        generator = CTranslate2Generator.for_cpu(output_dir, 2)
        assert torch.get_num_threads() == 3
        generator.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=MAX_NEW_TOKENS)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_texts_and_the_one_off_helper(converted, tokenizer):
    model, output_dir = converted("pre_ln_learned_relu")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    expected, _ = hf_tokens(model, batch, num_beams=1)
    assert ctranslate2_generate(output_dir, batch["input_ids"], num_beams=1, max_new_tokens=MAX_NEW_TOKENS) == expected
    generator = CTranslate2Generator(output_dir)
    texts = generator.translate(INPUTS, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert texts == [text.strip() for text in tokenizer.batch_decode(expected, skip_special_tokens=True)]


def test_devices_are_named_as_torch_names_them(converted, tokenizer):
    model, output_dir = converted("pre_ln_learned_relu")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    expected, _ = hf_tokens(model, batch, num_beams=1)
    generator = CTranslate2Generator(output_dir, device="cpu:0")  # torch's "cuda:1" reaches the second GPU alike
    assert generator.generate(batch["input_ids"], num_beams=1, max_new_tokens=MAX_NEW_TOKENS) == expected
    for device in ("mps", "cuda:first", "cuda:"):
        with pytest.raises(ValueError, match=f"'cpu', 'cuda' or 'cuda:N' for CTranslate2, got '{device}'"):
            CTranslate2Generator(output_dir, device=device)


def test_int8_conversion_decodes_close_to_float32_but_not_as_it(tmp_path, tokenizer):
    model = random_translator(tokenizer, n_layer=1)
    output_dir = to_ctranslate2(save(model, tokenizer, tmp_path / "model"), tmp_path / "int8", quantization="int8")
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    expected, _ = hf_tokens(model, batch, num_beams=2, early_stopping=True)
    generator = CTranslate2Generator(output_dir)
    tokens = generator.generate(
        batch["input_ids"], batch["attention_mask"], num_beams=2, max_new_tokens=MAX_NEW_TOKENS, early_stopping=True
    )
    # Rounding the weights to 7 bits moves this model's log-probabilities by about 0.07 a token (another model of
    # these sizes: about 12; float32 conversion: 1e-6): most translations stay float32's, the probabilities do not.
    assert sum(row == reference for row, reference in zip(tokens, expected)) >= len(INPUTS) // 2, (tokens, expected)
    sources = generator._source_tokens(batch["input_ids"], batch["attention_mask"])
    targets = [[generator.target_tokens[i] for i in row if i != model.config.eos_token_id] for row in expected]
    scored = generator.translator.score_batch(sources, targets, max_input_length=0)
    int8 = torch.cat([torch.tensor(result.log_probs) for result in scored])
    float32 = torch.cat(teacher_forced_log_probs(model, batch, expected))
    assert 1e-3 < (int8 - float32).abs().mean().item() < 0.25
    assert (tmp_path / "int8" / "model.bin").stat().st_size < (tmp_path / "model" / "model.safetensors").stat().st_size


def test_unrepresentable_settings_raise_naming_them(tmp_path, tokenizer):
    config = tiny_config(embedding_layer_norm=True, embedding_layer_norm_epsilon=1e-3, layer_norm_epsilon=1e-5)
    with pytest.raises(ValueError, match="embedding_layer_norm_epsilon"):
        check_convertible(config)
    folder = save(random_translator(tokenizer, n_layer=1), tokenizer, tmp_path / "model")
    settings = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, "activation_function": "silu"}))
    with pytest.raises(ValueError, match="activation_function"):
        to_ctranslate2(folder, tmp_path / "out")
    (folder / "config.json").write_text(
        json.dumps({**settings, "embedding_layer_norm": True, "embedding_layer_norm_epsilon": 0.5})
    )
    with pytest.raises(ValueError, match="embedding_layer_norm_epsilon"):
        to_ctranslate2(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_classifier_folder_is_refused(tmp_path, tokenizer):
    model = TransformerForSequenceClassification(tiny_config(vocab_size=len(tokenizer), n_layer=1, num_labels=2))
    folder = save(model, tokenizer, tmp_path / "classifier")
    with pytest.raises(ValueError, match="seq2seq"):
        to_ctranslate2(folder, tmp_path / "out")


def test_an_existing_output_folder_needs_force(tmp_path, tokenizer):
    folder = save(random_translator(tokenizer, n_layer=1), tokenizer, tmp_path / "model")
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError, match="force"):
        to_ctranslate2(folder, tmp_path / "out")
    assert to_ctranslate2(folder, tmp_path / "out", force=True) == tmp_path / "out"
    assert (tmp_path / "out" / "model.bin").is_file()
    for output in (folder, tmp_path):  # the model folder itself, or a folder holding it
        with pytest.raises(ValueError, match="replace the model folder"):
            to_ctranslate2(folder, output, force=True)
    assert (folder / "config.json").is_file()
    # Another saved model: CTranslate2's force deletes the folder first, so it is refused whatever --force says.
    other = save(random_translator(tokenizer, n_layer=1), tokenizer, tmp_path / "other-model")
    with pytest.raises(ValueError, match=r"holds a saved model \(model.safetensors\)"):
        to_ctranslate2(folder, other, force=True)
    assert (other / "model.safetensors").is_file()


@pytest.mark.slow
def test_command_line(tmp_path, tokenizer):
    folder = save(random_translator(tokenizer, n_layer=1), tokenizer, tmp_path / "model")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    command = [sys.executable, "-m", "hf_transformer.export", "ctranslate2", str(folder), str(tmp_path / "out")]
    completed = subprocess.run(
        [*command, "--quantization", "int8"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().splitlines()[-1] == str(tmp_path / "out")
    assert (tmp_path / "out" / "model.bin").is_file()
    batch = tokenizer(INPUTS[:2], return_tensors="pt", padding=True)
    assert len(CTranslate2Generator(tmp_path / "out").generate(batch["input_ids"], max_new_tokens=3)) == 2


def cpuinfo(vendor: str, flags: str) -> str:
    processor = f"processor\t: {{}}\nvendor_id\t: {vendor}\nflags\t\t: fpu sse2 avx avx2 {flags}\n"
    return "\n".join(processor.format(index) for index in range(2))  # two processors, separated by a blank line


AVX512 = "avx512f avx512cd avx512bw avx512dq avx512vl"


@pytest.mark.parametrize(
    ("vendor", "flags", "environ", "chosen"),
    [
        ("AuthenticAMD", AVX512, {}, "AVX512"),  # CTranslate2 would pick AVX2 there
        ("AuthenticAMD", "avx512f avx512cd", {}, None),  # not every AVX-512 part CTranslate2 needs
        ("GenuineIntel", AVX512, {}, None),  # CTranslate2 picks AVX-512 there by itself
        ("AuthenticAMD", AVX512, {"CT2_FORCE_CPU_ISA": "AVX2"}, "AVX2"),  # the user's choice stands
    ],
)
def test_avx512_is_chosen_for_ctranslate2_on_amd_cpus_that_have_it(vendor, flags, environ, chosen):
    environ = dict(environ)
    changed = prefer_avx512(environ, cpuinfo(vendor, flags))
    assert environ.get("CT2_FORCE_CPU_ISA") == chosen
    assert changed == (chosen == "AVX512")


@pytest.mark.parametrize(
    ("vendor", "flags", "environ", "saturate"),
    [
        ("AuthenticAMD", "avx2", {}, True),  # oneDNN's AVX2 int8 kernels sum pairs in 16 bits
        ("AuthenticAMD", "avx2 avx_vnni", {}, False),  # VNNI sums in 32 bits
        ("AuthenticAMD", AVX512 + " avx512_vnni", {}, False),
        ("AuthenticAMD", "avx2", {"CT2_USE_MKL": "1"}, False),  # MKL's kernels
        ("GenuineIntel", "avx2", {}, False),  # CTranslate2 takes MKL's there by itself
    ],
)
def test_cpus_whose_int8_products_saturate_are_named(vendor, flags, environ, saturate):
    assert int8_products_saturate(environ, cpuinfo(vendor, flags)) is saturate


def test_int8_weights_of_8_bits_are_warned_about_where_int8_products_saturate(tmp_path, tokenizer, monkeypatch):
    """A float folder computed in int8 (CTranslate2 rounds its weights to 8 bits when loading) is warned about on a CPU
    whose int8 products saturate, naming the remedy; the int8 export (7 bits) and float compute types are not."""
    import warnings

    from hf_transformer.export import ctranslate2_export

    model = random_translator(tokenizer, n_layer=1)
    folder = save(model, tokenizer, tmp_path / "model")
    float32, int8 = to_ctranslate2(folder, tmp_path / "float32"), to_ctranslate2(folder, tmp_path / "int8", "int8")
    monkeypatch.setattr(ctranslate2_export, "int8_products_saturate", lambda: True)
    with pytest.warns(UserWarning, match="take 8 bits.*saturate.*quantization='int8' \\(7-bit weights\\)"):
        CTranslate2Generator(float32, compute_type="int8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CTranslate2Generator(int8)
        CTranslate2Generator(int8, compute_type="int8_float32")
        CTranslate2Generator(float32)
    monkeypatch.setattr(ctranslate2_export, "int8_products_saturate", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CTranslate2Generator(float32, compute_type="int8")


@pytest.mark.parametrize("quantization", ["int8", "int8_float16"])
def test_int8_weights_are_stored_within_7_bits(tmp_path, tokenizer, quantization):
    """oneDNN's int8 products on AVX2 without VNNI (CTranslate2's on an AMD CPU) sum pairs of uint8 x int8 products in
    16 bits: 8-bit weights saturate them, 7-bit ones fit. Each row of every quantized weight reaches +-63 and no
    further, scaled back to float32's values; the model keeps float32's variables and ties, the others in the
    quantization's float type."""
    model = random_translator(tokenizer, n_layer=1, tie_word_embeddings=True)
    folder = save(model, tokenizer, tmp_path / "model")
    float32, float32_aliases = read_model_bin(to_ctranslate2(folder, tmp_path / "float32") / "model.bin")
    int8, aliases = read_model_bin(to_ctranslate2(folder, tmp_path / "int8", quantization=quantization) / "model.bin")
    assert aliases == float32_aliases and aliases, aliases
    # The quantized weights: those whose scales are new.
    weights = [name.removesuffix("_scale") for name in int8 if name.endswith("_scale") and name not in float32]
    assert len(weights) >= 10 and all(int8[name].dtype == np.int8 for name in weights), weights
    assert set(int8) == set(float32) | {f"{name}_scale" for name in weights}
    for name in weights:
        assert (np.abs(int8[name].astype(np.int16)).max(axis=1) == 63).all(), name
        restored = int8[name] / int8[f"{name}_scale"][:, None]
        assert np.abs(restored - float32[name]).max() <= np.abs(float32[name]).max() / 126 + 1e-6, name
    # The other variables (not scalars, not the new scales) in the quantization's float type.
    others = {value.dtype for name, value in int8.items() if name in float32 and name not in weights and value.ndim}
    assert others == {np.dtype(np.float16 if quantization == "int8_float16" else np.float32)}


def test_generation_settings_the_engine_does_not_apply_are_warned_about(converted, tokenizer, tmp_path):
    """A folder whose generation config sets what CTranslate2Generator does not apply (generate would) is warned about
    when the generator is built, naming each; a folder without them is not."""
    import shutil
    import warnings

    _, folder = converted("post_ln_sinusoidal_gelu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CTranslate2Generator(folder)
    copy = shutil.copytree(folder, tmp_path / "with-settings")
    settings = json.loads((copy / "generation_config.json").read_text())
    settings.update(no_repeat_ngram_size=2, repetition_penalty=1.3, bad_words_ids=[[5], [6, 7]], num_beams=2)
    settings.update(exponential_decay_length_penalty=[3, 1.5])  # changes generate's scores too
    (copy / "generation_config.json").write_text(json.dumps(settings))
    told = (
        r"ignores the generation settings \['bad_words_ids', 'exponential_decay_length_penalty', "
        r"'no_repeat_ngram_size', 'repetition_penalty'\]"
    )
    with pytest.warns(UserWarning, match=told):
        generator = CTranslate2Generator(copy)
    assert generator.generate(texts=INPUTS[:2], max_new_tokens=3)  # it still decodes, with the settings it applies
    with pytest.raises(TypeError):
        generator.generate(texts=INPUTS[:2], no_repeat_ngram_size=2)  # never taken as an argument either
