"""The demo app (hf_transformer.app): its functions give Predictor's outputs, bad input gets a clear message, the
command refuses what is not a model folder, and hub.write_space writes a Space that builds the app."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_transformer import (
    Predictor,
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
)
from hf_transformer.tokenization import train_tokenizer
from tests.helpers.launch import load_script
from tests.helpers.models import record_calls, tiny_config

gr = pytest.importorskip("gradio")

from hf_transformer import app as demo_app  # noqa: E402
from hf_transformer import hub  # noqa: E402

WORDS = "a dog runs on the grass . the red cat sits on a small ball . ein hund läuft auf dem gras".split()
SENTENCE = "a dog runs on the grass"
SENTENCES = [SENTENCE, "the red cat sits", "ein hund", "a small ball", "on the grass", "a red ball"]


def train_reverser(tokenizer, ids: dict, steps: int = 60) -> TransformerForConditionalGeneration:
    """A tiny translator trained for a few steps (a second or two) to reverse the order of a phrase's words: its
    outputs are words, not empty, and it is unsure enough that beam search, the length penalty and the length
    limit each change some of them."""
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(tiny_config(**ids, decoder_start_token_id=ids["bos_token_id"]))
    phrases = [" ".join(WORDS[i : i + n]) for n in range(2, 7) for i in range(len(WORDS) - n)]
    sources = tokenizer(phrases, return_tensors="pt", padding=True)
    labels = tokenizer(text_target=[" ".join(p.split()[::-1]) for p in phrases], return_tensors="pt", padding=True)
    labels = labels["input_ids"].masked_fill(labels["input_ids"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    draws = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(phrases), (16,), generator=draws)
        batch = {"input_ids": sources["input_ids"][rows], "attention_mask": sources["attention_mask"][rows]}
        model(**batch, labels=labels[rows]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def make_folders(root: Path) -> dict[str, Path]:
    """Tiny saved seq2seq (briefly trained) and classifier (untrained) folders with a trained tokenizer."""
    torch.manual_seed(0)
    texts = [" ".join(WORDS[i : i + 6]) for i in range(len(WORDS))] * 10
    tokenizer = train_tokenizer(texts, vocab_size=60, model_type="bpe", show_progress=False)
    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    folders = {"seq2seq": root / "seq2seq", "classifier": root / "classifier"}
    train_reverser(tokenizer, ids).save_pretrained(folders["seq2seq"])
    classifier = TransformerForSequenceClassification(
        tiny_config(
            **ids, num_labels=2, id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1}
        )
    )
    classifier.eval().save_pretrained(folders["classifier"])
    for folder in folders.values():
        tokenizer.save_pretrained(folder)
    return folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return make_folders(tmp_path_factory.mktemp("app"))


@pytest.fixture(scope="module")
def translator(folders):
    return demo_app.Demo(folders["seq2seq"])


@pytest.fixture(scope="module")
def classifier(folders):
    return demo_app.Demo(folders["classifier"])


def test_the_module_imports_gradio_only_inside_functions():
    tree = ast.parse(Path(demo_app.__file__).read_text(encoding="utf-8"))
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level for alias in node.names] + [
        node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)
    ]
    assert not [name for name in names if name.split(".")[0] == "gradio"], names


def option_settings(defaults: dict) -> dict[str, list[tuple]]:
    """Settings of the options (beams, max new tokens, length penalty) in pairs that differ in one option."""
    longest = defaults["max_new_tokens"]
    return {
        "num_beams": [(1, longest, 1.0), (3, longest, 1.0)],
        "max_new_tokens": [(1, longest, 1.0), (1, 3, 1.0)],
        "length_penalty": [(3, longest, 0.2), (3, longest, 2.0)],
    }


def check_options_reach_the_predictor(app_outputs, predictor: Predictor, defaults: dict, lines=SENTENCES) -> None:
    """``app_outputs(lines, beams, new_tokens, penalty)`` is ``predictor``'s translation of ``lines`` with these
    options, at every setting; and each option changes some translation (were it dropped, this would fail)."""
    for option, settings in option_settings(defaults).items():
        seen = []
        for beams, new_tokens, penalty in settings:
            options = dict(num_beams=beams, max_new_tokens=new_tokens)
            if beams > 1:
                options["length_penalty"] = penalty
            expected = predictor.translate(lines, **options)
            assert app_outputs(lines, beams, new_tokens, penalty) == expected, (option, beams, new_tokens, penalty)
            seen.append(expected)
        assert seen[0] != seen[1], f"{option} changes no translation here: the test cannot see it dropped"


def test_translation_is_predictors(translator, folders):
    predictor = Predictor.from_pretrained(folders["seq2seq"])
    assert translator.translate(SENTENCE) == predictor.translate([SENTENCE])[0] != ""

    def sentence_tab(lines, *options):
        return [translator.translate(f"  {line}\n", *options, "torch") for line in lines]

    check_options_reach_the_predictor(sentence_tab, predictor, translator.defaults())


def test_batch_gives_one_line_per_line(translator, folders):
    lines = [SENTENCE, "", "the red cat sits", "ein hund", "a red ball"]
    predictor = Predictor.from_pretrained(folders["seq2seq"])

    def batch_tab(lines, *options):
        return translator.run_lines("\n".join(lines) + "\n", *options, "torch").split("\n")

    check_options_reach_the_predictor(batch_tab, predictor, translator.defaults(), lines)
    assert predictor.translate(lines, num_beams=2, max_new_tokens=6)[1] == ""  # a blank line gets a blank line
    assert all(predictor.translate(lines)[i] for i in (0, 2, 3, 4))


def test_classifier_gives_label_and_scores(classifier, folders):
    (result,) = Predictor.from_pretrained(folders["classifier"]).classify([SENTENCE])
    assert classifier.classify(SENTENCE) == result["scores"]
    assert classifier.run_lines(f"{SENTENCE}\n\n") == f"{result['label']}\t{result['score']:.4f}\n"
    assert classifier.engines() == ["torch"]


def test_attention_explorer_is_an_escaped_iframe(translator, classifier):
    pytest.importorskip("hf_transformer.attention_view")
    translation = translator.translate(SENTENCE)
    for shown in (translator.attention_html(SENTENCE, target=translation), classifier.attention_html(SENTENCE)):
        assert shown.startswith('<iframe class="attention-explorer"') and 'sandbox="allow-scripts"' in shown
        assert "<script" not in shown and "&lt;" in shown  # the page is inside srcdoc, escaped


@pytest.mark.parametrize(
    "text, message",
    [("", "the input is empty"), ("   \n ", "the input is empty"), (" ".join(["dog"] * 40), "at most 24 tokens")],
)
def test_bad_sentences_get_a_clear_message(translator, classifier, text, message):
    calls = [translator.translate, translator.attention_html]
    if "empty" in message:
        calls.append(classifier.classify)
    for call in calls:
        with pytest.raises(demo_app.InputError, match=message):
            call(text)


def test_a_classifier_reads_a_long_text_as_the_predictor_does(classifier, folders):
    """A classifier's entry points cut a long text to the position table, as the Predictor, the pipeline and
    training do (refusing is for translation, where cutting would drop part of the output unseen)."""
    long_text = " ".join(WORDS * 3)
    predictor = Predictor.from_pretrained(folders["classifier"])
    assert len(predictor.tokenizer(long_text)["input_ids"]) > predictor.input_length_limit()
    expected = predictor.classify([long_text])[0]
    assert classifier.classify(long_text) == pytest.approx(expected["scores"])
    assert (
        classifier.run_lines(f"a dog\n{long_text}\n").split("\n")[1] == f"{expected['label']}\t{expected['score']:.4f}"
    )
    shown = classifier.attention_html(long_text)
    assert shown.startswith('<iframe class="attention-explorer"')


def test_bad_batches_and_options_get_a_clear_message(translator):
    with pytest.raises(demo_app.InputError, match="the input is empty"):
        translator.run_lines("\n\n")
    with pytest.raises(demo_app.InputError, match=r"Line 2 is \d+ tokens long; this model reads at most 24"):
        translator.run_lines("a dog\n" + " ".join(["dog"] * 40))
    with pytest.raises(demo_app.InputError, match="number of beams"):
        translator.translate(SENTENCE, 0)
    with pytest.raises(demo_app.InputError, match="not a classification model"):
        translator.classify(SENTENCE)


def test_the_app_shows_messages_not_stack_traces(folders):
    app = demo_app.build_app(folders["seq2seq"])
    assert isinstance(app, gr.Blocks)
    handler = demo_app._shown(gr, app.demo.translate)
    defaults = app.demo.defaults()
    expected = Predictor.from_pretrained(folders["seq2seq"]).translate([SENTENCE])[0]
    assert handler(SENTENCE, defaults["num_beams"], defaults["max_new_tokens"], 1.0, "torch") == expected != ""
    with pytest.raises(gr.Error, match="the input is empty"):
        handler("", 1, 5, 1.0, "torch")
    with pytest.raises(gr.Error, match="RuntimeError: broken"):
        demo_app._shown(gr, lambda: (_ for _ in ()).throw(RuntimeError("broken")))()
    assert "explorer failed: ZeroDivisionError" in demo_app._attention_shown(lambda: 1 / 0)()


def test_classifier_app_builds(folders):
    app = demo_app.build_app(folders["classifier"])
    assert isinstance(app, gr.Blocks) and app.demo.task == "classification"


def test_ctranslate2_engine_is_predictors(translator, folders, monkeypatch):
    """The engine chosen in the page decodes: CTranslate2's generator, the app's own, and not torch's generate; its
    outputs are a CTranslate2 Predictor's (compared within the engine) in both tabs, with every option."""
    pytest.importorskip("ctranslate2")
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator

    predictor = Predictor.from_pretrained(folders["seq2seq"], engine="ctranslate2")
    defaults = translator.defaults()
    expected = predictor.translate([SENTENCE])[0]
    generators = record_calls(monkeypatch, CTranslate2Generator, "generate")
    torch_models = record_calls(monkeypatch, TransformerForConditionalGeneration, "generate")
    assert translator.translate(SENTENCE, 1, defaults["max_new_tokens"], 1.0, "ctranslate2") == expected != ""
    app_generator = translator.predictor("ctranslate2").ctranslate2_generator
    assert generators and all(generator is app_generator for generator in generators)
    assert not torch_models

    def sentence_tab(lines, *options):
        return [translator.translate(line, *options, "ctranslate2") for line in lines]

    def batch_tab(lines, *options):
        return translator.run_lines("\n".join(lines), *options, "ctranslate2").split("\n")

    for tab in (sentence_tab, batch_tab):
        check_options_reach_the_predictor(tab, predictor, defaults)
    assert not torch_models


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root / "missing" / "folder", "No folder at"),
        (lambda root: (root / "empty").mkdir() or root / "empty", "is not a model folder: it has no config.json"),
        (lambda root: (root / "file.txt").write_text("x") and root / "file.txt", "is a file, not a model folder"),
    ],
)
def test_the_command_refuses_what_is_not_a_model_folder(tmp_path, make, message):
    folder = make(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        demo_app.main([str(folder)])
    assert message in str(stopped.value) and "\n" not in str(stopped.value)


def test_the_command_refuses_a_folder_without_tokenizer(tmp_path, folders):
    TransformerForConditionalGeneration(tiny_config()).save_pretrained(tmp_path / "bare")
    with pytest.raises(SystemExit, match="has no tokenizer"):
        demo_app.main([str(tmp_path / "bare")])


def test_the_command_refuses_a_masked_token_folder(tmp_path, folders):
    TransformerForMaskedLM(tiny_config()).save_pretrained(tmp_path / "masked")
    shutil.copy(folders["seq2seq"] / "tokenizer.json", tmp_path / "masked")
    with pytest.raises(SystemExit, match="a masked-token model: the demo app serves translation"):
        demo_app.main([str(tmp_path / "masked")])


def test_the_command_serves_on_localhost(folders, monkeypatch):
    served = []
    monkeypatch.setattr(demo_app, "launch", lambda app, **options: served.append((app, options)))
    demo_app.main([str(folders["seq2seq"]), "--port", "7999"])
    ((app, options),) = served
    assert isinstance(app, gr.Blocks) and options == {"host": "127.0.0.1", "port": 7999}
    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"


@pytest.mark.slow
def test_write_space_writes_an_app_that_builds(tmp_path, folders):
    space = hub.write_space(folders["seq2seq"], tmp_path / "space")
    requirements = (space / "requirements.txt").read_text().splitlines()
    assert any(line.startswith("gradio") and ">=" in line for line in requirements), requirements
    assert any(line.startswith("torch>=") for line in requirements) and not any("extra" in r for r in requirements)
    assert "sdk: gradio" in (space / "README.md").read_text()
    assert (space / "model" / "model.safetensors").is_file() and (space / "hf_transformer" / "app.py").is_file()
    # The Space's own copy of the package builds the app of the model beside app.py (in a Python of its own).
    code = "import app, hf_transformer; print(hf_transformer.__file__); print(app.demo.demo.task)"
    result = subprocess.run([sys.executable, "-c", code], cwd=space, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    package_file, task = result.stdout.strip().splitlines()[-2:]
    assert Path(package_file).resolve() == (space / "hf_transformer" / "__init__.py").resolve() and task == "seq2seq"


def test_write_space_for_a_hub_id_and_refusals(tmp_path, folders):
    space = hub.write_space("someone/model", tmp_path / "space")
    assert "MODEL = 'someone/model'" in (space / "app.py").read_text() and not (space / "model").exists()
    # A title YAML would read otherwise (": " a mapping, "#" a comment) stays the folder's name.
    import yaml

    for name in ("en-de: v2", "run #3", "[draft] model"):
        space = hub.write_space(f"someone/{name}", tmp_path / name)
        metadata = (space / "README.md").read_text().split("---")[1]
        assert yaml.safe_load(metadata)["title"] == name
    with pytest.raises(ValueError, match="would replace the model folder"):
        hub.write_space(folders["seq2seq"], folders["seq2seq"])
    with pytest.raises(FileNotFoundError):
        hub.write_space("./no/such/folder", tmp_path / "other")
    assert hub.SPACE_SERVES == demo_app.SERVES  # a Space shows what the app shows


def test_a_space_is_written_only_into_a_new_folder_or_a_space_s_own(tmp_path, folders):
    """A Space written into a model folder replaced its card; into a source tree it replaced the package's source."""
    before = {path.name: path.read_bytes() for path in folders["seq2seq"].iterdir() if path.is_file()}
    with pytest.raises(ValueError, match=r"--space_dir .* holds what no Space written here does \(.*config.json"):
        hub.write_space("someone/model", folders["seq2seq"])
    assert {path.name: path.read_bytes() for path in folders["seq2seq"].iterdir() if path.is_file()} == before
    package_root = Path(hub.__file__).resolve().parents[1]
    with pytest.raises(ValueError, match=r"hf_transformer \(this package's own source\)"):
        hub.check_space_dir(package_root)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match=r"--space_dir .*notes.txt is a file"):
        hub.write_space("someone/model", tmp_path / "notes.txt")
    clone = tmp_path / "clone"  # a clone of the Space's own repository, and the Space written there before
    (clone / ".git").mkdir(parents=True)
    (clone / ".gitattributes").write_text("")
    hub.write_space("someone/model", clone)
    assert hub.write_space("someone/other", clone) == clone
    assert "MODEL = 'someone/other'" in (clone / "app.py").read_text()


def test_push_to_hub_writes_the_space_and_uploads_nothing(tmp_path, folders, monkeypatch, capsys):
    push_to_hub = load_script("push_to_hub")
    monkeypatch.setattr(push_to_hub.hub, "upload", lambda *a, **k: pytest.fail("uploaded"))
    space, upload = tmp_path / "space", tmp_path / "upload"
    push_to_hub.main(
        [str(folders["seq2seq"]), "--repo_id", "someone/model", "--dry-run", str(upload), "--space_dir", str(space)]
    )
    assert (upload / "model.safetensors").is_file()
    assert {"app.py", "requirements.txt", "README.md"} <= {path.name for path in space.iterdir()}
    assert "MODEL = 'someone/model'" in (space / "app.py").read_text()
    assert "nothing was uploaded" in capsys.readouterr().out
    # A model that cannot be prepared leaves no Space behind; a Space folder that is a model's is refused first.
    with pytest.raises((OSError, ValueError)):
        push_to_hub.main([str(tmp_path / "absent"), "--repo_id", "a/b", "--dry-run", str(tmp_path / "u2"),
                          "--space_dir", str(tmp_path / "space2")])  # fmt: skip
    assert not (tmp_path / "space2").exists()
    with pytest.raises(ValueError, match="holds what no Space written here does"):
        push_to_hub.main([str(folders["seq2seq"]), "--repo_id", "a/b", "--dry-run", str(tmp_path / "u3"),
                          "--space_dir", str(folders["classifier"])])  # fmt: skip
    assert not (tmp_path / "u3").exists()
