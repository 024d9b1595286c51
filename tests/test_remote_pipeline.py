"""A saved translation folder carries its pipeline as transformers' ``custom_pipelines`` entry, as it carries its
model code: ``pipeline(PIPELINE_TASK, model=folder, trust_remote_code=True)`` translates in a Python where
hf_transformer cannot be imported, and where it can, the installed pipeline serves the task without remote code."""

from __future__ import annotations

import ast
import json
import sys
import textwrap

import pytest
import torch
from transformers import pipeline

from hf_transformer import (
    PIPELINE_TASK,
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
)
from hf_transformer.pipelines import TranslationPipeline
from tests.helpers.launch import isolated_python
from tests.helpers.models import tiny_config

SENTENCES = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 4
TEXTS = ["a man rides a red bike .", "two dogs", "ein mann fährt"]
# The pipeline's module and what it imports, copied beside the model code of a translation folder only.
PIPELINE_MODULES = {"pipelines", "folders"}
# Imported by the copies where transformers itself is installed (tqdm is one of its requirements).
INSTALLED_WITH_TRANSFORMERS = {"torch", "transformers", "tqdm"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from hf_transformer.tokenization import train_tokenizer

    tokenizer = train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)
    root = tmp_path_factory.mktemp("remote-pipeline")
    saved = {}
    for name, model_class in (
        ("translator", TransformerForConditionalGeneration),
        ("classifier", TransformerForSequenceClassification),
        ("masked-lm", TransformerForMaskedLM),
    ):
        torch.manual_seed(0)
        model = model_class(tiny_config(vocab_size=len(tokenizer), n_layer=1, max_position_embeddings=48, num_labels=2))
        with torch.no_grad():  # weights far from the initialisation: the translations depend on the input
            for parameter_name, parameter in model.named_parameters():
                if parameter.dim() > 1:
                    parameter.normal_(0.0, 1.0 if "embed" in parameter_name else 0.5)
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        saved[name] = root / name
    return saved


def test_only_a_translation_folder_names_and_carries_the_pipeline(folders):
    config = json.loads((folders["translator"] / "config.json").read_text())
    assert config["custom_pipelines"] == {
        PIPELINE_TASK: {"impl": "pipelines.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    }
    copied = {path.stem for path in folders["translator"].glob("*.py")}
    assert PIPELINE_MODULES <= copied
    for name in ("classifier", "masked-lm"):
        assert "custom_pipelines" not in json.loads((folders[name] / "config.json").read_text())
        assert not PIPELINE_MODULES & {path.stem for path in folders[name].glob("*.py")}
    # The copies import each other (never a file the folder lacks) and, outside `try` blocks (optional libraries,
    # imported only where used), only what transformers brings and the standard library.
    for name in PIPELINE_MODULES:
        tree = ast.parse((folders["translator"] / f"{name}.py").read_text())
        optional = {id(node) for block in ast.walk(tree) if isinstance(block, ast.Try) for node in ast.walk(block)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in copied, (name, ast.unparse(node))
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in optional:
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for module in modules:
                    top = module.split(".")[0]
                    assert top in INSTALLED_WITH_TRANSFORMERS or top in sys.stdlib_module_names, ast.unparse(node)


def test_the_installed_pipeline_serves_the_task_without_remote_code(folders):
    # The folder's entry is for remote code: where the package is installed it is not read, so transformers does not
    # ask for trust_remote_code, and the installed pipeline runs also when remote code is allowed.
    for options in ({}, {"trust_remote_code": True}):
        translate = pipeline(PIPELINE_TASK, model=str(folders["translator"]), **options)
        assert type(translate) is TranslationPipeline
        assert len(translate(TEXTS, max_new_tokens=4)) == len(TEXTS)


# Runs in a Python where hf_transformer cannot be imported: only transformers' remote-code loading is used.
SCRIPT = r"""
import importlib.util, json, sys
assert importlib.util.find_spec("hf_transformer") is None, "hf_transformer is importable"
import torch
from transformers import pipeline

torch.set_num_threads(1)
folder, out = sys.argv[1:3]
translate = pipeline(TASK, model=folder, trust_remote_code=True)
modules = [type(translate).__module__, type(translate.model).__module__]
assert all(m.startswith("transformers_modules.") for m in modules), modules
results = {
    "greedy": translate(TEXTS, max_new_tokens=6),
    "beams": translate(TEXTS[0], num_beams=3, num_return_sequences=2, max_new_tokens=6),
    "ids": [[int(i) for i in r["translation_token_ids"]] for r in translate(TEXTS, return_tensors=True)],
}
json.dump(results, open(out, "w"))
"""


@pytest.mark.slow
def test_a_translation_folder_runs_its_pipeline_without_the_package(folders, tmp_path):
    translate = pipeline(PIPELINE_TASK, model=str(folders["translator"]))
    expected = {
        "greedy": translate(TEXTS, max_new_tokens=6),
        "beams": translate(TEXTS[0], num_beams=3, num_return_sequences=2, max_new_tokens=6),
        "ids": [[int(i) for i in r["translation_token_ids"]] for r in translate(TEXTS, return_tensors=True)],
    }
    assert len({tuple(ids) for ids in expected["ids"]}) > 1, expected  # the outputs test something
    script = tmp_path / "load.py"
    script.write_text(f"TASK, TEXTS = {PIPELINE_TASK!r}, {TEXTS!r}\n" + textwrap.dedent(SCRIPT))
    run = isolated_python(script, str(folders["translator"]), str(tmp_path / "out.json"), tmp=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "custom code" not in run.stdout + run.stderr  # trust_remote_code=True: no prompt
    assert json.loads((tmp_path / "out.json").read_text()) == expected


# Loads the folder through remote code, saves the model again (as a fine-tuning would), and runs the pipeline of
# the new folder: it must carry the pipeline its config names.
RESAVE = r"""
import importlib.util, json, sys
assert importlib.util.find_spec("hf_transformer") is None, "hf_transformer is importable"
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

torch.set_num_threads(1)
folder, again, out = sys.argv[1:4]
AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).save_pretrained(again)
AutoTokenizer.from_pretrained(folder).save_pretrained(again)
translate = pipeline(TASK, model=again, trust_remote_code=True)
json.dump({"greedy": translate(TEXTS, max_new_tokens=6)}, open(out, "w"))
"""


@pytest.mark.slow
def test_a_folder_loaded_through_remote_code_and_saved_again_keeps_its_pipeline(folders, tmp_path):
    expected = {"greedy": pipeline(PIPELINE_TASK, model=str(folders["translator"]))(TEXTS, max_new_tokens=6)}
    script = tmp_path / "resave.py"
    script.write_text(f"TASK, TEXTS = {PIPELINE_TASK!r}, {TEXTS!r}\n" + textwrap.dedent(RESAVE))
    again = tmp_path / "again"
    run = isolated_python(script, str(folders["translator"]), str(again), str(tmp_path / "out.json"), tmp=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    assert PIPELINE_MODULES <= {path.stem for path in again.glob("*.py")}
    assert json.loads((again / "config.json").read_text())["custom_pipelines"][PIPELINE_TASK]["impl"] == (
        "pipelines.TranslationPipeline"
    )
    assert json.loads((tmp_path / "out.json").read_text()) == expected
