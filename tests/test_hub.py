"""Hub sharing: auto_map and copied code, the folder scripts/push_to_hub.py uploads, loading it with
trust_remote_code in a Python where hf_transformer cannot be imported, and the upload guards."""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerFast,
)

from hf_transformer import (
    Predictor,
    TransformerConfig,
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
    TransformerModel,
    hub,
)
from tests.helpers.launch import isolated_python, load_script
from tests.helpers.models import check_card_describes_folder, tiny_config

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "someone/tiny-transformer"
EXAMPLE = "the cat sat on the mat"
WORDS = "the cat sat on a mat dog ran to park big small red blue one two three sun moon star".split()
FULL_AUTO_MAP = {
    "AutoConfig": "configuration_transformer.TransformerConfig",
    "AutoModel": "modeling_transformer.TransformerModel",
    "AutoModelForSeq2SeqLM": "modeling_transformer.TransformerForConditionalGeneration",
    "AutoModelForSequenceClassification": "modeling_transformer.TransformerForSequenceClassification",
    "AutoModelForMaskedLM": "modeling_transformer.TransformerForMaskedLM",
}


push_to_hub = load_script("push_to_hub")


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ids 0..24 of the tiny models' 40: [PAD] 0, [UNK] 1, [BOS] 2, [EOS] 3."""
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A [EOS]", special_tokens=[("[EOS]", 3)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


# Fixed inputs; row 1 is padded.
SOURCE = [[4, 5, 6, 7, 8, 3], [9, 10, 3, 0, 0, 0]]
TARGET = [[2, 11, 12, 13], [2, 14, 15, 0]]


def reference_outputs(seq2seq, classifier) -> dict[str, torch.Tensor]:
    """What the subprocess computes, from the models in this process (the same code as its SCRIPT)."""
    source, target = torch.tensor(SOURCE), torch.tensor(TARGET)
    mask = source.ne(0)
    with torch.no_grad():
        return {
            "lm_logits": seq2seq(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits,
            "generated": seq2seq.generate(source, attention_mask=mask, num_beams=3, max_new_tokens=6),
            "base_hidden": seq2seq.model(
                input_ids=source, attention_mask=mask, decoder_input_ids=target
            ).last_hidden_state,
            "cls_logits": classifier(input_ids=source, attention_mask=mask).logits,
        }


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A seq2seq folder (weights, tokenizer, results), its dry-run upload folder, and a classifier folder."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hub")
    seq2seq = TransformerForConditionalGeneration(tiny_config()).eval()
    classifier = TransformerForSequenceClassification(tiny_config(num_labels=3)).eval()
    model_dir, classifier_dir, upload_dir = root / "trained", root / "classifier", root / "upload"
    seq2seq.save_pretrained(model_dir)
    word_tokenizer().save_pretrained(model_dir)
    (model_dir / "all_results.json").write_text(json.dumps({"eval_loss": 1.25, "eval_exact_match": 0.875}))
    classifier.save_pretrained(classifier_dir)
    word_tokenizer().save_pretrained(classifier_dir)

    push_to_hub.main(
        [
            str(model_dir),
            "--repo_id",
            REPO_ID,
            "--dry-run",
            str(upload_dir),
            "--language",
            "en",
            "--dataset",
            "someone/pairs",
            "--metric",
            "exact_match",
            "--tag",
            "reversal",
            "--example",
            EXAMPLE,
        ]
    )
    return {
        "root": root,
        "model_dir": model_dir,
        "classifier_dir": classifier_dir,
        "upload_dir": upload_dir,
        "reference": reference_outputs(seq2seq, classifier),
        "reference_ids": word_tokenizer()([EXAMPLE])["input_ids"],
    }


def card_snippet(folder: Path) -> str:
    card = (folder / "README.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    assert len(snippets) == 1, card
    assert f'repo_id = "{REPO_ID}"' in snippets[0]
    return snippets[0].replace(REPO_ID, str(folder))


# The model file and the modules it imports, copied beside the weights by save_pretrained.
REMOTE_CODE_MODULES = (
    "configuration_transformer", "modeling_transformer", "checkpoint", "generation", "speed", "input_checks",
)  # fmt: skip


def test_save_pretrained_writes_full_auto_map_and_self_contained_code(saved):
    for folder in (saved["model_dir"], saved["classifier_dir"]):
        assert json.loads((folder / "config.json").read_text())["auto_map"] == FULL_AUTO_MAP
        for name in REMOTE_CODE_MODULES:
            assert (folder / f"{name}.py").read_text() == (ROOT / "hf_transformer" / f"{name}.py").read_text()
        # A translation folder also carries its pipeline's code (tests/test_remote_pipeline.py checks those files).
        pipeline_code = {"pipelines", "folders"} if folder == saved["model_dir"] else set()
        assert sorted(p.stem for p in folder.glob("*.py")) == sorted({*REMOTE_CODE_MODULES, *pipeline_code})
    # The copies import only each other, torch, transformers (with huggingface_hub, which transformers requires: its
    # strict dataclasses check the configuration) and the standard library.
    copied = REMOTE_CODE_MODULES
    for name in copied:
        tree = ast.parse((saved["model_dir"] / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in copied, ast.unparse(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for module in modules:
                    top = module.split(".")[0]
                    assert top in {"torch", "transformers", "huggingface_hub"} or top in sys.stdlib_module_names, (
                        ast.unparse(node)
                    )


def test_dry_run_writes_the_upload_folder_with_a_model_card(saved):
    folder = saved["upload_dir"]
    names = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "configuration_transformer.py",
        "modeling_transformer.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
    } <= names
    assert "all_results.json" not in names
    assert json.loads((folder / "config.json").read_text())["auto_map"] == FULL_AUTO_MAP
    # transformers saves how the tokenizer was loaded here (offline, from a folder): not for the Hub's users.
    tokenizer_settings = json.loads((folder / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(tokenizer_settings) and tokenizer_settings["pad_token"]

    card = ModelCard.load(folder / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] == "apache-2.0"
    assert meta["language"] == ["en"]
    assert meta["datasets"] == ["someone/pairs"]
    assert meta["metrics"] == ["exact_match"]
    assert meta["pipeline_tag"] == "text2text-generation"
    assert meta["library_name"] == "transformers"
    assert {"hf_transformer", "custom_code", "reversal"} <= set(meta["tags"])
    [result] = card.data.eval_results
    assert (result.metric_type, result.metric_value, result.dataset_type) == ("exact_match", 0.875, "someone/pairs")
    assert "| eval_exact_match | 0.875 |" in card.text and "| eval_loss | 1.25 |" in card.text
    check_card_describes_folder(folder, repo_id=REPO_ID)  # the Hub id given, in the usage snippet
    assert "base_model" not in meta


def test_push_names_the_base_model_given_and_notes_a_local_one(saved, tmp_path, capsys):
    # A folder whose own card (as train_classifier.py --init_from writes it) names a local folder as its base model.
    folder = tmp_path / "fine-tuned"
    (tmp_path / "pretrained").mkdir()
    save_model(folder, tokenizer=True)
    text = hub.CardText(base_model=str(tmp_path / "pretrained"))
    (folder / "README.md").write_text(hub.model_card(folder, {}, text))
    check_card_describes_folder(folder, base_model=str(tmp_path / "pretrained"))
    push_to_hub.main([str(folder), "--repo_id", REPO_ID, "--dry-run", str(tmp_path / "plain")])
    assert "was fine-tuned from the folder" in capsys.readouterr().out
    assert ModelCard.load(tmp_path / "plain" / "README.md").data.base_model is None  # a local path is not a Hub id
    push_to_hub.main(
        [str(folder), "--repo_id", REPO_ID, "--base_model", "someone/pretrained", "--dry-run", str(tmp_path / "named")]
    )
    assert "fine-tuned from the folder" not in capsys.readouterr().out
    check_card_describes_folder(tmp_path / "named", base_model="someone/pretrained", repo_id=REPO_ID)


def test_the_uploaded_card_says_what_the_run_s_own_card_says_and_what_the_command_adds(saved, tmp_path):
    # A training run's card (save_run keeps its CardText beside it): its title, training paragraph, settings and
    # evaluation reach the upload; the command's own fields win; a local base model is no Hub id.
    folder = tmp_path / "run"
    (tmp_path / "pretrained").mkdir()
    save_model(folder, tokenizer=True)
    text = hub.CardText(
        title="Transformer En -> De (toy)", training="Trained from scratch on 1,000 pairs.", evaluation="sacreBLEU.",
        settings={"learning_rate": 0.0007}, datasets=["toy"], language=["en", "de"],
        base_model=str(tmp_path / "pretrained"),
    )  # fmt: skip
    (folder / "README.md").write_text(hub.model_card(folder, {}, text))
    hub.write_card_text(folder, text)
    push_to_hub.main([str(folder), "--repo_id", REPO_ID, "--dry-run", str(tmp_path / "up"), "--dataset", "other"])
    card = (tmp_path / "up" / "README.md").read_text()
    for said in ("Transformer En -> De (toy)", "Trained from scratch on 1,000 pairs.", "sacreBLEU.", "learning_rate"):
        assert said in card, said
    data = ModelCard.load(tmp_path / "up" / "README.md").data
    assert data.datasets == ["other"] and data.language == ["en", "de"] and data.base_model is None
    assert not (tmp_path / "up" / hub.CARD_TEXT_FILE).exists()  # kept in the run's folder, not uploaded


def test_saved_weights_take_the_umask_as_every_other_file_of_the_folder(tmp_path):
    # safetensors 0.8 writes its files 0600 whatever the umask (huggingface/safetensors#782): a folder saved by one
    # user (or a container) could not be read by the user who serves it.
    old = os.umask(0o022)
    try:
        model = TransformerForConditionalGeneration(tiny_config())
        model.save_pretrained(tmp_path / "whole")
        model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
        os.umask(0o027)
        model.save_pretrained(tmp_path / "group")
    finally:
        os.umask(old)
    for folder, mode in ((tmp_path / "whole", 0o644), (tmp_path / "sharded", 0o644), (tmp_path / "group", 0o640)):
        weights = sorted(folder.glob("*.safetensors"))
        assert weights and len(weights) > (folder.name == "sharded")
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()}
        assert modes == dict.fromkeys(modes, mode), modes  # config.json, the code files and the weights alike


def test_loads_with_the_package_and_no_trust_remote_code(saved):
    folder, reference = saved["upload_dir"], saved["reference"]
    source, target = torch.tensor(SOURCE), torch.tensor(TARGET)
    mask = source.ne(0)
    assert type(AutoConfig.from_pretrained(folder)) is TransformerConfig
    seq2seq = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    base = AutoModel.from_pretrained(folder).eval()
    classifier = AutoModelForSequenceClassification.from_pretrained(saved["classifier_dir"]).eval()
    assert type(seq2seq) is TransformerForConditionalGeneration
    assert type(base) is TransformerModel
    assert type(classifier) is TransformerForSequenceClassification
    # Given trust_remote_code anyway, transformers still prefers the registered classes to the copied code.
    assert type(AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)) is type(seq2seq)
    with torch.no_grad():
        assert torch.equal(
            seq2seq(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits, reference["lm_logits"]
        )
        assert torch.equal(
            base(input_ids=source, attention_mask=mask, decoder_input_ids=target).last_hidden_state,
            reference["base_hidden"],
        )
        assert torch.equal(classifier(input_ids=source, attention_mask=mask).logits, reference["cls_logits"])
    assert AutoTokenizer.from_pretrained(folder)([EXAMPLE])["input_ids"] == saved["reference_ids"]


def test_card_snippet_runs_as_written(saved, capsys):
    exec(compile(card_snippet(saved["upload_dir"]), "README.md", "exec"), {})
    assert capsys.readouterr().out.startswith("[")


@pytest.mark.parametrize(
    "model_class, with_tokenizer",
    [
        (TransformerForSequenceClassification, True),
        (TransformerForConditionalGeneration, False),
        (TransformerModel, False),
        (TransformerForMaskedLM, True),
        (TransformerForMaskedLM, False),
    ],
)
def test_card_snippet_runs_for_every_head(tmp_path, capsys, model_class, with_tokenizer):
    model_dir, upload_dir = tmp_path / "model", tmp_path / "upload"
    model_class(tiny_config(num_labels=2)).save_pretrained(model_dir)
    if with_tokenizer:
        word_tokenizer().save_pretrained(model_dir)
    push_to_hub.main([str(model_dir), "--repo_id", REPO_ID, "--dry-run", str(upload_dir), "--example", EXAMPLE])
    capsys.readouterr()
    exec(compile(card_snippet(upload_dir), "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    expected = {
        TransformerForSequenceClassification: "LABEL_",
        TransformerForConditionalGeneration: "[[",
        TransformerModel: "torch.Size([1, 5, 32])",
        TransformerForMaskedLM: "[",  # the likeliest token at each position
    }[model_class]
    assert printed.startswith(expected), printed
    assert ("AutoTokenizer" in card_snippet(upload_dir)) == with_tokenizer
    pipeline_tag = {TransformerForMaskedLM: "fill-mask", TransformerModel: "feature-extraction"}
    expected_tag = pipeline_tag.get(model_class) or hub._PIPELINE_TAGS[model_class.__name__]
    assert ModelCard.load(upload_dir / "README.md").data.pipeline_tag == expected_tag


def test_a_classifier_card_s_snippet_reads_a_long_text_s_first_tokens(tmp_path, capsys):
    """A review longer than the model reads: the snippet's tokenizer cuts it, as `Predictor.classify` does (without
    the cut, the model refuses a sequence longer than its position table)."""
    model_dir, upload_dir = tmp_path / "model", tmp_path / "upload"
    TransformerForSequenceClassification(tiny_config(num_labels=2, max_position_embeddings=8)).save_pretrained(
        model_dir
    )
    tokenizer = word_tokenizer()
    tokenizer.model_max_length = 8
    tokenizer.save_pretrained(model_dir)
    long_text = " ".join([EXAMPLE] * 3)  # 18 words and [EOS]
    push_to_hub.main([str(model_dir), "--repo_id", REPO_ID, "--dry-run", str(upload_dir), "--example", long_text])
    capsys.readouterr()
    snippet = card_snippet(upload_dir)
    exec(compile(snippet, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == Predictor.from_pretrained(model_dir).classify([long_text])[0]["label"]
    with pytest.raises(ValueError, match="Sequence length 19 exceeds the position table of 8 positions"):
        exec(compile(snippet.replace("truncation=True, ", ""), "README.md", "exec"), {})


# Runs in a Python where hf_transformer cannot be imported: only transformers' remote-code loading is used.
SCRIPT = r"""
import importlib.util, json, sys
assert importlib.util.find_spec("hf_transformer") is None, "hf_transformer is importable"
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

torch.set_num_threads(1)
folder, classifier_folder, out, snippet_file = sys.argv[1:5]
source, target = torch.tensor(SOURCE), torch.tensor(TARGET)
mask = source.ne(0)
seq2seq = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
classifier = AutoModelForSequenceClassification.from_pretrained(classifier_folder, trust_remote_code=True).eval()
# AutoTokenizer reads the config first; without trust_remote_code it would prompt for the config's code.
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
modules = [type(m).__module__ for m in (seq2seq, base, classifier)]
assert all(m.startswith("transformers_modules.") for m in modules), modules
with torch.no_grad():
    outputs = {
        "lm_logits": seq2seq(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits,
        "generated": seq2seq.generate(source, attention_mask=mask, num_beams=3, max_new_tokens=6),
        "base_hidden": base(input_ids=source, attention_mask=mask, decoder_input_ids=target).last_hidden_state,
        "cls_logits": classifier(input_ids=source, attention_mask=mask).logits,
    }
torch.save(outputs, out + "/outputs.pt")
json.dump({"ids": tokenizer([EXAMPLE])["input_ids"], "modules": modules}, open(out + "/info.json", "w"))
exec(compile(open(snippet_file).read(), "README.md", "exec"), {})
"""


@pytest.mark.slow
def test_loads_without_the_package_through_trust_remote_code(saved):
    tmp, reference = saved["root"] / "isolated", saved["reference"]
    tmp.mkdir()
    snippet = tmp / "snippet.py"
    snippet.write_text(card_snippet(saved["upload_dir"]))
    script = tmp / "load.py"
    script.write_text(f"SOURCE, TARGET, EXAMPLE = {SOURCE!r}, {TARGET!r}, {EXAMPLE!r}\n" + textwrap.dedent(SCRIPT))
    run = isolated_python(
        script, str(saved["upload_dir"]), str(saved["classifier_dir"]), str(tmp), str(snippet), tmp=tmp
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "custom code" not in run.stdout + run.stderr  # trust_remote_code=True everywhere: no prompt
    assert run.stdout.strip().startswith("["), run.stdout  # the card snippet printed its decoded output

    outputs = torch.load(tmp / "outputs.pt")
    assert outputs.keys() == reference.keys()
    for name, expected in reference.items():
        assert torch.equal(outputs[name], expected), name
    info = json.loads((tmp / "info.json").read_text())
    assert info["ids"] == saved["reference_ids"]


def save_model(folder: Path, model_class=TransformerForConditionalGeneration, tokenizer=False, **config) -> Path:
    """A model folder as save_pretrained writes it (with the tokenizer if asked): what model_card reads."""
    torch.manual_seed(0)
    model_class(tiny_config(**config)).save_pretrained(folder)
    if tokenizer:
        word_tokenizer().save_pretrained(folder)
    return folder


def test_card_says_not_evaluated_without_results(tmp_path):
    folder = save_model(tmp_path / "model")
    card = hub.model_card(folder, text=hub.CardText(license="mit"))
    assert "Not evaluated" in card
    assert "license: mit" in card and "model-index" not in card
    assert "torch.tensor([[" in card  # without a tokenizer the snippet feeds token ids
    # Not yet on the Hub: a placeholder id that says so, not the folder's path; the folder names the card.
    assert f'repo_id = "your-name/{folder.name}"  # placeholder: ' in card and f"# {folder.name}" in card
    check_card_describes_folder(folder, card=card)


def test_card_shows_named_metrics_by_split_training_and_generation_settings(tmp_path):
    # What the training scripts put in their cards (scripts/train_translation.py and train_classifier.py).
    folder = save_model(tmp_path / "en-de")
    generation = GenerationConfig.from_pretrained(folder)
    generation.num_beams, generation.length_penalty = 5, 0.6
    generation.save_pretrained(folder)  # the decoding settings the card reports are the folder's
    results = {"test_bleu": 41.234, "eval_bleu": 40.0, "test_bleu_lc_tok": 43.0, "examples": [{"source": "x"}]}
    text = hub.CardText(
        datasets=["someone/pairs"], metrics=["bleu", "bleu_lc_tok"], tags=["translation"],
        metric_columns={"bleu": "BLEU (beam 5)", "bleu_lc_tok": "lc-tok BLEU"}, digits=2,
        title="Transformer En -> De", training="Trained on pairs.", evaluation="sacreBLEU.",
        settings={"d_model": 32, "note": "a | b"},
    )  # fmt: skip
    card = hub.model_card(folder, results, text, repo_id="runs/en-de")
    assert "# Transformer En -> De" in card and "Trained on pairs." in card
    assert (
        "<details>\n<summary>Settings</summary>" in card and "| d_model | 32 |" in card and "| note | a \\| b |" in card
    )
    assert "| split | BLEU (beam 5) | lc-tok BLEU |" in card
    assert "| test | 41.23 | 43.00 |" in card and "| validation | 40.00 | n/a |" in card
    assert "| test_bleu | 41.23 |" in card and "examples" not in card  # every scalar result, nothing else
    assert "beam size 5, length penalty 0.6" in card and "num_beams=5, length_penalty=0.6," in card
    assert 'repo_id = "runs/en-de"' in card
    parsed = ModelCard(card)
    assert parsed.data.pipeline_tag == "translation"  # a seq2seq model tagged translation
    bleu = next(result for result in parsed.data.eval_results if result.metric_type == "bleu")
    assert (bleu.metric_value, bleu.dataset_split) == (41.234, "test")
    # A script may also write the test figures under plain names: they are still the test split's.
    results.update(bleu=41.234, bleu_lc_tok=43.0)
    card = hub.model_card(folder, results, hub.CardText(datasets=["someone/pairs"], metrics=["bleu", "bleu_lc_tok"]))
    assert {(r.metric_type, r.dataset_split) for r in ModelCard(card).data.eval_results} == {
        ("bleu", "test"),
        ("bleu_lc_tok", "test"),
    }
    assert ModelCard(card).data.pipeline_tag == "text2text-generation"  # not tagged translation


@pytest.mark.parametrize(
    "model_class, config",
    [
        (TransformerForConditionalGeneration, {}),  # one table for encoder, decoder and output projection
        (TransformerForConditionalGeneration, {"tie_word_embeddings": False}),
        (TransformerForConditionalGeneration, {"share_embeddings": False, "tie_word_embeddings": False}),
        (TransformerForSequenceClassification, {"num_labels": 3}),
        # the n-gram score's tables are stored beside the weights and are not parameters
        (TransformerForSequenceClassification, {"classifier_ngram_buckets": 64, "classifier_ngram_unit": "token"}),
        (TransformerForSequenceClassification, {"classifier_ngram_buckets": 64}),
        (TransformerForMaskedLM, {}),
        (TransformerModel, {"position_embedding_type": "learned"}),
    ],
)
def test_card_reads_the_number_of_parameters_from_the_weights(tmp_path, model_class, config):
    model = model_class(tiny_config(**config))
    model.save_pretrained(tmp_path / "whole")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    for folder in (tmp_path / "whole", tmp_path / "sharded"):
        assert hub.count_parameters(folder, type(model).__name__) == model.num_parameters()  # tied: stored once
    assert f"built with `hf_transformer`: {model.num_parameters():,} parameters," in hub.model_card(tmp_path / "whole")
    assert hub.count_parameters(tmp_path) is None  # no weights: the card leaves the size out


@pytest.mark.parametrize(
    "model_class, tags, expected",
    [
        (TransformerForConditionalGeneration, (), "text2text-generation"),
        (TransformerForConditionalGeneration, ("translation",), "translation"),
        (TransformerForSequenceClassification, ("translation",), "text-classification"),
        (TransformerForMaskedLM, (), "fill-mask"),
        (TransformerModel, (), "feature-extraction"),
    ],
)
def test_card_takes_the_pipeline_tag_from_the_config(tmp_path, model_class, tags, expected):
    folder = save_model(tmp_path / "model", model_class, tokenizer=True, num_labels=2)
    card = ModelCard(hub.model_card(folder, text=hub.CardText(tags=tags)))
    assert card.data.pipeline_tag == expected
    assert f"`{model_class.__name__}`" in card.text and "AutoTokenizer" in card.text  # head and tokenizer, read
    # the classifier pools the encoder by default: like the masked-LM head, it is not tagged encoder-decoder
    assert ("encoder-decoder" in card.data.tags) == (
        model_class in (TransformerForConditionalGeneration, TransformerModel)
    )


@pytest.mark.parametrize(
    "model_class, config",
    [
        (TransformerForConditionalGeneration, {"share_embeddings": False, "tie_word_embeddings": False}),
        (TransformerForSequenceClassification, {"num_labels": 3}),
        (TransformerForSequenceClassification, {"num_labels": 2, "classifier_pooling": "decoder"}),
        (TransformerForMaskedLM, {}),
        (TransformerModel, {}),
    ],
)
def test_card_settings_are_the_folders_not_the_arguments(tmp_path, model_class, config):
    folder = save_model(tmp_path / "model", model_class, tokenizer=True, **config)
    # What a script's argument defaults would say: a tokenizer not given, a vocabulary size never used.
    arguments = {"tokenizer": None, "vocab_size": 8000, "d_model": 512, "learning_rate": 0.001, "unused": None}
    card = hub.model_card(folder, {}, hub.CardText(settings=arguments))
    shown = check_card_describes_folder(folder, {"learning_rate": 0.001}, card=card)
    assert "| vocab_size | 40 |" in shown and "| tokenizer_vocab_size | 24 |" in shown and "| d_model | 32 |" in shown
    assert "| tokenizer | WordLevel |" in shown and "unused" not in shown
    uses_the_decoder = (
        model_class in (TransformerForConditionalGeneration, TransformerModel)
        or config.get("classifier_pooling") == "decoder"
    )
    assert ("| decoder_layers | 2 |" in shown) == uses_the_decoder


def test_card_of_a_folder_without_config_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"No folder at {tmp_path / 'missing'}")):
        hub.model_card(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty is not a model folder: it has no config.json"):
        hub.model_card(tmp_path / "empty", {"eval_loss": 1.0})


def test_card_reads_results_json_by_default(tmp_path):
    folder = save_model(tmp_path / "model")
    results = {"eval_accuracy": 0.75, "test_accuracy": 0.5, "curve": [1, 2], "command": "x" * 300}
    (folder / "results.json").write_text(json.dumps(results))
    text = hub.CardText(datasets=["someone/reviews"], metrics=["accuracy"])
    card = hub.model_card(folder, text=text)
    assert "| validation | 0.7500 |" in card and "| test | 0.5000 |" in card
    assert "| eval_accuracy | 0.75 |" in card and "curve" not in card and "xxx" not in card
    assert [(r.metric_value, r.dataset_split) for r in ModelCard(card).data.eval_results] == [(0.5, "test")]
    assert "Not evaluated" in hub.model_card(folder, {}, text)  # results given (none) are not replaced


def test_dry_run_refuses_a_folder_that_is_not_empty(saved):
    with pytest.raises(FileExistsError, match="not empty"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID, "--dry-run", str(saved["model_dir"])])


# -- upload guards: HfApi is replaced, so nothing here can reach a network --------------------------------


class FakeApi:
    calls: list = []
    whoami_error: Exception | None = None

    def __init__(self, *args, **kwargs):
        pass

    def whoami(self, token=None):
        FakeApi.calls.append(("whoami", token))
        if FakeApi.whoami_error is not None:
            raise FakeApi.whoami_error
        return {"name": "someone"}

    def create_repo(self, repo_id, **kwargs):
        FakeApi.calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def create_branch(self, repo_id, **kwargs):
        FakeApi.calls.append(("create_branch", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        kwargs["files"] = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        FakeApi.calls.append(("upload_folder", kwargs))


@pytest.fixture
def fake_hub(monkeypatch):
    FakeApi.calls, FakeApi.whoami_error = [], None
    monkeypatch.setattr(hub, "HfApi", FakeApi)
    monkeypatch.setattr(hub, "get_token", lambda: "hf_test_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    return FakeApi


def test_offline_stops_before_uploading(saved, fake_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="HF_HUB_OFFLINE is set"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID])
    assert fake_hub.calls == []


def test_no_token_stops_before_uploading(saved, fake_hub, monkeypatch):
    monkeypatch.setattr(hub, "get_token", lambda: None)
    with pytest.raises(SystemExit, match="No Hugging Face token"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID])
    assert fake_hub.calls == []


def test_unreachable_hub_stops_before_uploading(saved, fake_hub):
    fake_hub.whoami_error = ConnectionError("no route to host")
    with pytest.raises(SystemExit, match="Cannot reach the Hugging Face Hub"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID])
    assert [call[0] for call in fake_hub.calls] == ["whoami"]


def test_upload_passes_repo_options(saved, fake_hub):
    push_to_hub.main(
        [
            str(saved["model_dir"]),
            "--repo_id",
            REPO_ID,
            "--private",
            "--revision",
            "v1",
            "--commit_message",
            "First model",
        ]
    )
    (_, token), (_, repo, create), (_, _, branch), (_, upload) = fake_hub.calls
    assert token == "hf_test_token" and repo == REPO_ID
    assert create == {"token": "hf_test_token", "private": True, "exist_ok": True}
    assert branch["branch"] == "v1"
    assert upload["repo_id"] == REPO_ID and upload["revision"] == "v1" and upload["commit_message"] == "First model"
    assert upload["files"] == sorted(p.name for p in saved["upload_dir"].iterdir())


def test_the_usage_snippet_generates_with_the_folder_s_length_or_the_whole_table(tmp_path):
    # A saved length is generate's own (passing another beside it makes transformers warn at every call); without
    # one, generate would stop at 20 new tokens where the decoder holds more.
    model = TransformerForConditionalGeneration(tiny_config(max_position_embeddings=64))
    model.save_pretrained(tmp_path / "plain")
    model.generation_config.max_length = 65
    model.save_pretrained(tmp_path / "with-length")
    plain, with_length = (hub.model_card(tmp_path / name) for name in ("plain", "with-length"))
    assert "num_beams=4, max_new_tokens=64)" in plain
    assert "max_new_tokens" not in with_length and "Decoding: max_length 65" in with_length


def test_dry_run_refuses_another_model_s_tokenizer_and_a_results_file_that_is_not_there(saved, tmp_path):
    """A tokenizer of another size packaged with the model gave every text other ids; a --results file mistyped was
    left out of the card without a word."""
    from tests.helpers.models import sentence_tokenizer

    other = tmp_path / "other-tokenizer"
    sentence_tokenizer().save_pretrained(other)
    with pytest.raises(ValueError, match=r"other-tokenizer has \d+ tokens and the model's token table \d+: it is not"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID, "--dry-run", str(tmp_path / "a"),
                          "--tokenizer", str(other)])  # fmt: skip
    with pytest.raises(FileNotFoundError, match="results file\\(s\\) not found: .*absent.json"):
        push_to_hub.main([str(saved["model_dir"]), "--repo_id", REPO_ID, "--dry-run", str(tmp_path / "b"),
                          "--results", str(tmp_path / "absent.json")])  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
