"""Sharing a model folder on the Hugging Face Hub.

``model_card(folder, results, text)`` writes the text of a folder's ``README.md``: YAML metadata, a description,
how the model was trained, its evaluation results and a usage snippet. What the folder says is read from it (the
configuration, the number of parameters, whether a tokenizer is there, the saved generation settings, the model's
settings table: its tokenizer's kind and size and the configuration's sizes); what a training run says about itself
(a title, how it was trained and scored, what it used that the folder does not keep, the model it was fine-tuned
from, languages, datasets, metrics) comes in a ``CardText``. The training scripts write it into their output
folders and ``prepare_folder`` into the folder it uploads: one function, so that a folder's card and its card on the
Hub say the same things.

``prepare_folder`` writes the folder that is uploaded: the weights (safetensors), ``config.json`` with
``auto_map``, the configuration and modeling source (so that the model loads with ``trust_remote_code=True``
where this package is not installed), the tokenizer and the model card. ``check_can_upload`` and ``upload`` push
it with ``huggingface_hub``; ``scripts/push_to_hub.py`` is the command line. ``write_space(folder, output_dir)``
writes a Hugging Face Space of the demo app (:mod:`hf_transformer.app`) for a folder or a Hub id.

What a folder holds (its head, tokenizer and weights) is read by :func:`hf_transformer.saved_folder.read_folder`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, get_token
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoTokenizer, GenerationConfig

from . import modeling_transformer
from .configuration_transformer import TransformerConfig
from .folders import CLASSIFICATION, SEQ2SEQ, looks_like_a_path, refuse_replacing
from .saved_folder import HEADS, MODEL, FolderError, SavedFolder, read_folder, tokenizer_place, weight_files
from .tokenization.morphemes import MorphemeTokenizerFast

# What Trainer writes (all_results.json, eval_results.json) and what the training scripts write (results.json).
RESULT_FILES = ("all_results.json", "eval_results.json", "test_results.json", "results.json")
DEFAULT_TAGS = ("hf_transformer", "encoder-decoder", "transformer", "custom_code")
DEFAULT_EXAMPLE = "Attention is all you need."
# Rows of the card's table of named metrics: prefix of the results keys -> split shown.
DEFAULT_RESULT_ROWS = {"eval": "validation", "test": "test"}
# The usage snippet of a folder's own card (not yet on the Hub) loads it from this id, with PLACEHOLDER_NOTE beside it.
PLACEHOLDER_REPO_ID = "your-name/{name}"
PLACEHOLDER_NOTE = "placeholder: the id given to scripts/push_to_hub.py --repo_id, or this folder's path"
# The generation defaults a card reports (and its usage snippet uses), where the folder saved them.
GENERATION_SETTINGS = ("num_beams", "length_penalty", "max_new_tokens", "max_length")

SEQ2SEQ_HEAD = "TransformerForConditionalGeneration"
# Hub pipeline tag of each head (a seq2seq model tagged "translation" gets "translation"); the head's Auto class is
# hf_transformer.saved_folder.HEADS's.
_PIPELINE_TAGS = {
    SEQ2SEQ_HEAD: "text2text-generation",
    "TransformerForSequenceClassification": "text-classification",
    "TransformerForMaskedLM": "fill-mask",
    "TransformerModel": "feature-extraction",
}


class HubError(RuntimeError):
    """Raised before anything is uploaded: no token, offline, or the Hub cannot be reached."""


@dataclass
class CardText:
    """What a training run says about itself in its model card; everything is optional.

    ``title`` replaces the folder's or repository's name as heading. ``training`` (the data, the initialisation)
    and ``settings`` (what the run used that the folder does not keep: optimisation, regularisers; shown after the
    model's settings, read from the folder by ``folder_settings``, in a collapsed table; None values are left out)
    describe the training; ``base_model`` names the model it was fine-tuned from (metadata); ``evaluation`` says
    how the metrics were computed. ``example`` is the input of the usage snippet (default ``DEFAULT_EXAMPLE``).
    ``language``, ``tags``, ``datasets`` and ``metrics`` go into the metadata; ``model-index`` takes each metric's
    plain, else test, else validation value from the results, on the first dataset. ``metrics``, unless
    ``metric_columns`` (metric -> heading) names others, are also the columns of a table of named results, one row
    per split of ``result_rows`` (prefix of the results keys -> split shown; default ``DEFAULT_RESULT_ROWS``), with
    ``digits`` decimals.
    """

    title: str | None = None
    training: str | None = None
    evaluation: str | None = None
    example: str | None = None
    language: Sequence[str] = ()
    tags: Sequence[str] = ()
    datasets: Sequence[str] = ()
    metrics: Sequence[str] = ()
    metric_columns: Mapping[str, str] | None = None
    result_rows: Mapping[str, str] | None = None
    digits: int = 4
    settings: Mapping[str, Any] | None = None
    license: str = "apache-2.0"
    base_model: str | None = None


# The file beside a training run's model card that keeps its ``CardText``, so that the card uploaded to the Hub
# (``prepare_folder``) says what the run's own card says.
CARD_TEXT_FILE = "card_text.json"


def write_card_text(folder: str | os.PathLike, text: CardText | None) -> None:
    """Keep ``text`` beside the folder's card (``CARD_TEXT_FILE``); nothing for a card without one."""
    if text is not None:
        saved = json.dumps(dataclasses.asdict(text), indent=2, ensure_ascii=False, default=list)
        (Path(folder) / CARD_TEXT_FILE).write_text(saved + "\n", encoding="utf-8")


def saved_card_text(folder: str | os.PathLike, given: CardText | None = None) -> CardText | None:
    """The ``CardText`` a training run kept in ``folder`` with the fields of ``given`` that differ from a blank
    ``CardText`` over it (what an upload's command line says wins); ``given`` alone where the folder keeps none."""
    path = Path(folder) / CARD_TEXT_FILE
    if not path.is_file():
        return given
    fields = {f.name for f in dataclasses.fields(CardText)}  # a field another version wrote is left out
    saved = CardText(**{k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k in fields})
    if saved.base_model is not None and (Path(saved.base_model).is_dir() or looks_like_a_path(saved.base_model)):
        saved = dataclasses.replace(saved, base_model=None)  # a folder here is no Hub id (`local_base_model`)
    if given is None:
        return saved
    blank = CardText()
    changes = {f.name: getattr(given, f.name) for f in dataclasses.fields(CardText)}
    given_anew = {k: v for k, v in changes.items() if not _unset(v) and v != getattr(blank, k)}
    return dataclasses.replace(saved, **given_anew)


def _unset(value) -> bool:
    return value is None or (isinstance(value, (list, tuple, dict)) and not value)


# -- reading the model folder --------------------------------------------------------------------------


# How this machine loaded the tokenizer (transformers 5 saves them with it): an upload must not tell the Hub's users
# to load it offline.
_LOADING_OPTIONS = ("is_local", "local_files_only")


def _drop_loading_options(tokenizer_config: Path) -> None:
    if not tokenizer_config.is_file():
        return
    settings = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    if any(name in settings for name in _LOADING_OPTIONS):
        kept = {name: value for name, value in settings.items() if name not in _LOADING_OPTIONS}
        tokenizer_config.write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def find_tokenizer(model_dir: str | os.PathLike, tokenizer_dir: str | os.PathLike | None = None) -> Path | None:
    """``tokenizer_dir`` if given, else the model folder when it holds a saved tokenizer, else None."""
    if tokenizer_dir is not None:
        return Path(tokenizer_dir)
    place = tokenizer_place(model_dir)
    return Path(place) if place is not None else None


def _model_folder(folder) -> SavedFolder:
    """The folder as read, when it holds a whole model saved by ``save_pretrained``; else ``FolderError``."""
    described = read_folder(folder, hub=False)
    if described.kind != MODEL:
        raise FolderError(
            f"{folder} is not a model folder written by save_pretrained: it holds a {described.kind} model"
        )
    return described


def _head(described: SavedFolder) -> str:
    """The head saved in the folder; a folder of a class not of this package's is read as a seq2seq model."""
    return described.head or SEQ2SEQ_HEAD


def _stored_sizes(path: Path) -> dict[str, int]:
    """The number of elements of each tensor of a safetensors file by name, from its header (8 bytes of length, then
    JSON)."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    return {name: math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def _buffer_names(folder: str | os.PathLike, arch: str | None) -> set[str]:
    """The names of the buffers the folder's model class stores beside its parameters (the n-gram score's tables),
    from the class built on the meta device: no memory, no weights read."""
    import torch

    model_class = getattr(modeling_transformer, arch or "", None)
    if model_class is None:
        return set()
    with torch.device("meta"):
        model = model_class(TransformerConfig.from_pretrained(folder))
    return {name for name, _ in model.named_buffers()}


def count_parameters(folder: str | os.PathLike, arch: str | None = None) -> int | None:
    """The number of parameters stored in the folder's safetensors weights (``model.safetensors``, or the shards of
    its index), read from the files' headers, less the buffers the model class ``arch`` stores beside them. Tied
    copies are not stored, so this is ``model.num_parameters()``. None for a folder without safetensors weights."""
    files = [Path(folder) / name for name in weight_files(folder) if name.endswith(".safetensors")]
    if not files:
        return None
    buffers = _buffer_names(folder, arch)
    return sum(size for path in files for name, size in _stored_sizes(path).items() if name not in buffers)


def saved_generation(folder: str | os.PathLike) -> dict[str, Any]:
    """The beam-search settings the folder's ``generation_config.json`` keeps as the model's generation defaults,
    where they differ from transformers' (``GENERATION_SETTINGS``)."""
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        return {}
    saved, default = json.loads(path.read_text()), GenerationConfig()
    return {
        name: saved[name] for name in GENERATION_SETTINGS if name in saved and saved[name] != getattr(default, name)
    }


def tokenizer_settings(folder: str | os.PathLike) -> dict[str, Any]:
    """What the folder's tokenizer (``tokenizer.json``) is: its model (``Unigram``, ``BPE``, ...), its size with the
    added tokens (``len(tokenizer)``), and ``lowercase: true`` where it lowercases; empty without ``tokenizer.json``."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return {}
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    settings = {
        "tokenizer": type(tokenizer.model).__name__,
        "tokenizer_vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
    }
    if tokenizer.normalizer is not None and tokenizer.normalizer.normalize_str("AÄ") == "aä":
        settings["lowercase"] = True
    if cuts_morphemes(folder):
        settings["segmenter"] = "mecab-ko"
    return settings


def cuts_morphemes(folder: str | os.PathLike) -> bool:
    """Whether the folder's tokenizer cuts text into Korean morphemes first (``MorphemeTokenizerFast``), which needs
    python-mecab-ko wherever it loads: the package's ``morphemes`` extra."""
    path = Path(folder) / "tokenizer_config.json"
    return path.is_file() and json.loads(path.read_text()).get("tokenizer_class") == MorphemeTokenizerFast.__name__


# The configuration fields a card's settings table shows: the encoder's, the decoder's where the head uses it, and
# the head's own.
_ENCODER_SETTINGS = (
    "vocab_size", "d_model", "encoder_layers", "num_attention_heads", "intermediate_size", "activation_function",
    "dropout", "attention_dropout", "layer_norm_position", "position_embedding_type", "max_position_embeddings",
    "scale_embedding",
)  # fmt: skip
_DECODER_SETTINGS = (
    "decoder_layers", "decoder_max_position_embeddings", "activation_dropout", "share_embeddings",
    "tie_word_embeddings", "label_smoothing", "init_method",
)  # fmt: skip
_HEAD_SETTINGS = {
    "TransformerForSequenceClassification": (
        "classifier_pooling",
        "num_labels",
        "classifier_ngram_buckets",
        "classifier_ngram_order",
        "classifier_ngram_unit",
        "classifier_ngram_token_order",
    ),
    "TransformerForMaskedLM": ("tie_word_embeddings",),
}


def config_settings(arch: str, config: TransformerConfig) -> dict[str, Any]:
    """The saved configuration's sizes, dropouts and choices that the head uses (``config.json``'s names); a setting
    left unset (None: it takes another's value) is left out."""
    names = list(_ENCODER_SETTINGS)
    if not encoder_only(arch, config):
        names += _DECODER_SETTINGS
    names += [name for name in _HEAD_SETTINGS.get(arch, ()) if name not in names]
    return {name: getattr(config, name) for name in names if getattr(config, name) is not None}


@dataclass
class SavedModel:
    """What a model folder says about itself: its configuration and head, the number of parameters, whether a
    tokenizer is saved with it, (a seq2seq model) its saved generation settings, and ``settings``: its tokenizer's
    and configuration's (``tokenizer_settings``, ``config_settings``), what a training run used."""

    config: TransformerConfig
    arch: str
    num_parameters: int | None
    has_tokenizer: bool
    generation: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)


def read_model_folder(folder: str | os.PathLike) -> SavedModel:
    """The ``SavedModel`` of a folder written by ``save_pretrained``; raises if the folder has no ``config.json``."""
    described = _model_folder(folder)
    folder = Path(folder)
    config = TransformerConfig.from_pretrained(folder)
    arch = _head(described)
    return SavedModel(
        config=config,
        arch=arch,
        num_parameters=count_parameters(folder, arch),
        has_tokenizer=described.tokenizer is not None,
        generation=saved_generation(folder) if arch == SEQ2SEQ_HEAD else {},
        settings=tokenizer_settings(folder) | config_settings(arch, config),
    )


def read_eval_results(
    model_dir: str | os.PathLike, extra_files: Iterable[str | os.PathLike] = ()
) -> dict[str, float | int | str]:
    """Scalar entries of the results files in the model folder (``RESULT_FILES``) and of ``extra_files``;
    later files override earlier ones. Lists and nested objects (loss curves, examples) are left out."""
    files = [Path(model_dir) / name for name in RESULT_FILES] + [Path(f) for f in extra_files]
    results: dict[str, float | int | str] = {}
    for path in files:
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object of results, got {type(data).__name__}")
        results.update(scalar_results(data))
    return results


def scalar_results(results: Mapping[str, Any]) -> dict[str, float | int | str]:
    """The entries of ``results`` a card lists: numbers and short strings, not lists, objects or long commands."""
    return {
        key: value
        for key, value in results.items()
        if not isinstance(value, bool)
        and isinstance(value, (int, float, str))
        and not (isinstance(value, str) and len(value) > 200)
    }


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _metric_value(results: Mapping[str, Any], metric: str) -> tuple[Any, str | None]:
    """The value reported for ``metric`` and its split: the plain key, else the test split's, else validation's.
    A plain key that repeats a split's value (a script that also writes its test figures under plain names) is
    reported as that split's."""
    splits = ((f"test_{metric}", "test"), (f"eval_{metric}", "validation"))
    if _is_number(results.get(metric)):
        named = [split for key, split in splits if results.get(key) == results[metric]]
        return results[metric], (named[0] if named else None)
    for key, split in splits:
        if _is_number(results.get(key)):
            return results[key], split
    return None, None


def encoder_only(arch: str, config: TransformerConfig) -> bool:
    """Whether the head reads the encoder alone (the masked-LM head, a classifier that pools the encoder)."""
    return arch == "TransformerForMaskedLM" or (
        arch == "TransformerForSequenceClassification" and config.classifier_pooling != "decoder"
    )


def pipeline_tag(arch: str, tags: Sequence[str] = ()) -> str:
    """The Hub pipeline tag of the head; a seq2seq model whose tags include ``translation`` is a translation model."""
    if arch == SEQ2SEQ_HEAD and "translation" in tags:
        return "translation"
    return _PIPELINE_TAGS[arch]


# -- the usage snippet ---------------------------------------------------------------------------------


def _repo_line(repo_id: str, placeholder: bool) -> str:
    line = f"repo_id = {json.dumps(repo_id)}"
    return line + f"  # {PLACEHOLDER_NOTE}" if placeholder else line


def _snippet_inputs(
    repo_id: str, auto_class: str, config: TransformerConfig, has_tokenizer: bool, example: str, placeholder: bool
) -> list[str]:
    """The lines that load the model (and tokenizer) and build ``input_ids`` and ``attention_mask``. A classifier's
    tokenizer truncates (its text's first tokens are what the model was trained to read, as `Predictor.classify`
    reads them); the other heads' input is not cut, and the model refuses one longer than its position table."""
    if has_tokenizer:
        example = json.dumps(example, ensure_ascii=False)
        if auto_class == "AutoModelForSequenceClassification":
            tokenize = [
                "# a text longer than the model reads (the tokenizer's model_max_length) is cut to its first tokens",
                f'inputs = tokenizer([{example}], truncation=True, return_tensors="pt")',
            ]
        else:
            tokenize = [f'inputs = tokenizer([{example}], return_tensors="pt")']
        return [
            f"from transformers import {auto_class}, AutoTokenizer",
            "",
            _repo_line(repo_id, placeholder),
            "tokenizer = AutoTokenizer.from_pretrained(repo_id, trust_remote_code=True)",
            f"model = {auto_class}.from_pretrained(repo_id, trust_remote_code=True)",
            "",
            *tokenize,
            'input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]',
        ]
    specials = {config.pad_token_id, config.bos_token_id, *config.end_token_ids, config.decoder_start_token_id}
    ids = [i for i in range(config.vocab_size) if i not in specials][:4]
    ids.extend(config.end_token_ids[:1])
    return [
        "import torch",
        f"from transformers import {auto_class}",
        "",
        _repo_line(repo_id, placeholder),
        f"model = {auto_class}.from_pretrained(repo_id, trust_remote_code=True)",
        "",
        "# token ids of the model's vocabulary (no tokenizer was published with it)",
        f"input_ids = torch.tensor([{ids}])",
        f"attention_mask = input_ids.ne({config.pad_token_id})",
    ]


def _snippet_generate(config: TransformerConfig, has_tokenizer: bool, generation: Mapping[str, Any]) -> list[str]:
    settings = [f"num_beams={generation.get('num_beams', 4)}"]
    if "length_penalty" in generation:
        settings.append(f"length_penalty={generation['length_penalty']}")
    if "max_new_tokens" not in generation and "max_length" not in generation:
        # generate's default would be 20 new tokens; a translation may take what the decoder's table holds
        settings.append(f"max_new_tokens={config.decoder_max_position_embeddings}")
    return [
        f"output_ids = model.generate(input_ids, attention_mask=attention_mask, {', '.join(settings)})",
        "print(tokenizer.batch_decode(output_ids, skip_special_tokens=True))"
        if has_tokenizer
        else "print(output_ids.tolist())",
    ]


def _snippet_outputs(
    arch: str, config: TransformerConfig, has_tokenizer: bool, generation: Mapping[str, Any] | None
) -> list[str]:
    """The lines that run the head and print what it gives."""
    if arch == SEQ2SEQ_HEAD:
        return _snippet_generate(config, has_tokenizer, generation or {})
    if arch == "TransformerForSequenceClassification":
        return [
            "logits = model(input_ids=input_ids, attention_mask=attention_mask).logits",
            "print(model.config.id2label[logits.argmax(-1).item()])",
        ]
    if arch == "TransformerForMaskedLM":
        decoded = "tokenizer.batch_decode(logits.argmax(-1))" if has_tokenizer else "logits.argmax(-1).tolist()"
        return [
            "logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (1, length, vocabulary)",
            f"print({decoded})  # the likeliest token at every position",
        ]
    return [
        "encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state",
        "print(encoded.shape)",
    ]


def usage_snippet(
    repo_id: str,
    arch: str,
    config: TransformerConfig,
    has_tokenizer: bool,
    example: str,
    generation: Mapping[str, Any] | None = None,
    *,
    placeholder: bool = False,
) -> str:
    """Python code that loads the model from ``repo_id`` (a Hub id or a folder) and runs it; it needs only torch and
    transformers. A seq2seq model generates with ``generation``'s beam size and length penalty (default 4 beams).
    ``placeholder``: ``repo_id`` stands for the id the folder will be pushed to, and the snippet says so."""
    lines = _snippet_inputs(repo_id, HEADS[arch], config, has_tokenizer, example, placeholder)
    return "\n".join(lines + _snippet_outputs(arch, config, has_tokenizer, generation))


# -- the model card ------------------------------------------------------------------------------------


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def metric_table(
    results: Mapping[str, Any], columns: Mapping[str, str], rows: Mapping[str, str], digits: int = 4
) -> str | None:
    """A Markdown table of named metrics: one row per split (``rows``: prefix of the results keys -> split shown),
    one column per metric (``columns``: metric -> heading), e.g. ``results["test_bleu"]`` in row "test", column
    "bleu". Splits without any of the metrics are left out; None when no split has one."""

    def cell(key: str) -> str:
        value = results.get(key)
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value) if _is_number(value) else "n/a"

    lines = [
        f"| {label} | " + " | ".join(cell(f"{prefix}_{metric}") for metric in columns) + " |"
        for prefix, label in rows.items()
        if any(_is_number(results.get(f"{prefix}_{metric}")) for metric in columns)
    ]
    if not lines:
        return None
    head = "| split | " + " | ".join(columns.values()) + " |\n|---|" + "---|" * len(columns)
    return "\n".join([head, *lines])


def _setting_cell(value) -> str:
    shown = value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False, default=str)
    return shown.replace("|", "\\|").replace("\n", " ")


def settings_table(settings: Mapping[str, Any]) -> str:
    """The run's settings as a Markdown table inside a collapsed ``<details>`` block."""
    rows = "\n".join(f"| {name} | {_setting_cell(value)} |" for name, value in settings.items())
    return f"<details>\n<summary>Settings</summary>\n\n| setting | value |\n|---|---|\n{rows}\n\n</details>"


def _generation_line(generation: Mapping[str, Any]) -> str:
    names = {"num_beams": "beam size", "length_penalty": "length penalty"}
    settings = ", ".join(f"{names.get(name, name)} {value}" for name, value in generation.items())
    return f"Decoding: {settings} (the model's saved generation defaults)."


def _eval_results(results: Mapping[str, Any], text: CardText, task: str) -> list[EvalResult]:
    """The ``model-index`` entries: each of ``text.metrics`` found in the results, on the first dataset."""
    if not text.datasets:
        return []
    found = []
    for metric in text.metrics:
        value, split = _metric_value(results, metric)
        if value is not None:
            dataset = text.datasets[0]
            found.append(
                EvalResult(
                    task_type=task,
                    dataset_type=dataset,
                    dataset_name=dataset,
                    dataset_split=split,
                    metric_type=metric,
                    metric_value=value,
                )
            )
    return found


def card_metadata(model: SavedModel, results: Mapping[str, Any], text: CardText, model_name: str) -> ModelCardData:
    """The card's YAML metadata: license, languages, tags, datasets, metrics, pipeline tag and ``model-index``."""
    task = pipeline_tag(model.arch, text.tags)
    eval_results = _eval_results(results, text, task)
    only_encoder = encoder_only(model.arch, model.config)
    default_tags = [tag for tag in DEFAULT_TAGS if not (only_encoder and tag == "encoder-decoder")]
    return ModelCardData(
        license=text.license,
        language=list(text.language) or None,
        library_name="transformers",
        pipeline_tag=task,
        tags=list(dict.fromkeys([*default_tags, *text.tags])),
        datasets=list(text.datasets) or None,
        metrics=list(text.metrics) or None,
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
        base_model=text.base_model,
    )


def describe(model: SavedModel) -> str:
    """One paragraph on the architecture: head, size, depth, widths, layer norm, positions, activation, vocabulary."""
    config, arch = model.config, model.arch
    size = f"{model.num_parameters:,} parameters, " if model.num_parameters else ""
    what, layers = "The encoder of the Transformer", f"{config.encoder_layers} encoder layers"
    if not encoder_only(arch, config):
        what = "An encoder-decoder Transformer"
        layers = f"{config.encoder_layers} encoder and {config.decoder_layers} decoder layers"
    return (
        f"{what} (Vaswani et al., 2017, *Attention Is All You Need*), "
        f"`{arch}` ({HEADS[arch]}), built with `hf_transformer`: {size}d_model {config.d_model}, {layers}, "
        f"{config.num_attention_heads} heads of {config.head_dim}, feed-forward {config.intermediate_size}, "
        f"{config.layer_norm_position}-LN, {config.position_embedding_type} positions, "
        f"{config.activation_function}, vocabulary {config.vocab_size}."
    )


def card_settings(model: SavedModel, text: CardText) -> dict[str, Any]:
    """The card's settings table: the folder's (``SavedModel.settings``), then the run's (``text.settings``) where
    they are not None; a run's setting of the same name as the folder's is not shown twice."""
    run = {name: value for name, value in (text.settings or {}).items() if value is not None}
    return {**model.settings, **{name: value for name, value in run.items() if name not in model.settings}}


def _training_section(model: SavedModel, text: CardText) -> list[str]:
    settings = card_settings(model, text)
    if not (text.training or settings):
        return []
    sections = ["## Training"]
    if text.training:
        sections.append(text.training)
    if settings:
        sections.append(settings_table(settings))
    return sections


def _evaluation_section(model: SavedModel, results: Mapping[str, Any], text: CardText) -> list[str]:
    sections = ["## Evaluation", *([text.evaluation] if text.evaluation else [])]
    if model.generation:
        sections.append(_generation_line(model.generation))
    columns = text.metric_columns or {metric: metric for metric in text.metrics}
    rows = DEFAULT_RESULT_ROWS if text.result_rows is None else text.result_rows
    named = metric_table(results, columns, rows, text.digits)
    if named:
        sections.append(named)
    listed = scalar_results(results)
    if listed:
        table = "\n".join(f"| {key} | {_format_value(value)} |" for key, value in listed.items())
        sections.append(("All results:\n\n" if named else "") + f"| result | value |\n|---|---|\n{table}")
    else:
        sections.append("Not evaluated: no results file was published with this model.")
    return sections


def _usage_section(repo_id: str, model: SavedModel, example: str, placeholder: bool) -> list[str]:
    snippet = usage_snippet(
        repo_id, model.arch, model.config, model.has_tokenizer, example, model.generation, placeholder=placeholder
    )
    loads_with = (
        "The configuration and modeling code are saved beside the weights, so the model loads with `transformers` "
        "and\n`trust_remote_code=True` alone:"
    )
    if model.settings.get("segmenter") == "mecab-ko":
        loads_with = (
            "The configuration, modeling and tokenizer code are saved beside the weights, so the model loads with "
            "`transformers`,\n`trust_remote_code=True` and `python-mecab-ko` (`pip install python-mecab-ko`: the "
            "tokenizer cuts Korean text into\nmorphemes with MeCab-ko first):"
        )
    return [
        "## Usage",
        loads_with,
        f"```python\n{snippet}\n```",
        "Where the `hf_transformer` package is installed, `import hf_transformer` registers the classes with the "
        "Auto\nclasses and `trust_remote_code` is not needed.",
    ]


def model_card(
    folder: str | os.PathLike,
    results: Mapping[str, Any] | None = None,
    text: CardText | None = None,
    *,
    repo_id: str | None = None,
) -> str:
    """The text of ``README.md`` for the model saved in ``folder``: YAML metadata, a description, how the model was
    trained, its evaluation results and a usage snippet that loads it from ``repo_id`` (the Hub id it is pushed
    to; without one, ``PLACEHOLDER_REPO_ID`` with the folder's name, marked as a placeholder).

    The folder gives the configuration (head, sizes, pipeline tag), the number of parameters, whether a tokenizer
    is there, the saved generation settings (beam size, length penalty) and the settings table's model settings
    (its tokenizer's kind and size, the configuration's sizes and dropouts). ``results`` are the run's results
    (default: read from the folder's results files, ``RESULT_FILES``); every scalar result is listed. ``text`` is
    what the run says about itself (``CardText``). Raises ``FileNotFoundError`` if ``folder`` has no
    ``config.json``.
    """
    folder, text = Path(folder), text or CardText()
    model = read_model_folder(folder)
    results = read_eval_results(folder) if results is None else results
    placeholder = repo_id is None
    repo_id = PLACEHOLDER_REPO_ID.format(name=folder.resolve().name) if placeholder else repo_id
    model_name = repo_id.rstrip("/").split("/")[-1]
    sections = [
        f"# {text.title or model_name}",
        describe(model),
        *_training_section(model, text),
        *_evaluation_section(model, results, text),
        *_usage_section(repo_id, model, text.example or DEFAULT_EXAMPLE, placeholder),
    ]
    data = card_metadata(model, results, text, model_name)
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n"))


# -- the folder that is uploaded ---------------------------------------------------------------------------


def local_base_model(model_dir: str | os.PathLike) -> str | None:
    """The ``base_model`` that the card of ``model_dir`` (its ``README.md``, as a training script wrote it) names,
    where that is a folder here rather than a Hub id; else None. The uploaded card cannot name a local folder."""
    readme = Path(model_dir) / "README.md"
    if not readme.is_file():
        return None
    base = ModelCard.load(readme).data.to_dict().get("base_model")
    return base if isinstance(base, str) and Path(base).is_dir() else None


def check_tokenizer_fits(tokenizer, config, name) -> None:
    """Refuses a tokenizer (``name`` in the message) whose ids the model cannot read as it was trained to: more tokens
    than its token table, or other ids for its padding, start or end token."""
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer of {name} has {len(tokenizer)} tokens and the model's token table {config.vocab_size}: "
            "it is not the tokenizer the model was trained with"
        )
    # The model's own end token is the first of the config's (a config may name several).
    model_ids = dict(
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=next(iter(config.end_token_ids), None),
    )
    differ = [
        f"{token} {getattr(tokenizer, token)} there, {model_id} in the model"
        for token, model_id in model_ids.items()
        if None not in (getattr(tokenizer, token), model_id) and getattr(tokenizer, token) != model_id
    ]
    if differ:
        raise ValueError(f"the tokenizer of {name} is not the model's: {'; '.join(differ)}")


def prepare_folder(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    repo_id: str,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    results_files: Iterable[str | os.PathLike] = (),
    text: CardText | None = None,
) -> Path:
    """Write into ``out_dir`` (new or empty) exactly what is uploaded to ``repo_id``.

    The model is loaded and saved again rather than copied, so the folder always carries the current code
    files and the full ``auto_map`` whatever version wrote ``model_dir``. The card ([`model_card`] of the
    written folder, with ``text``) lists the results files of ``model_dir`` and ``results_files``.
    """
    described = _model_folder(model_dir)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    model = getattr(modeling_transformer, _head(described)).from_pretrained(model_dir)
    # Loaded before anything is written: one that cannot load here (its analyzer not installed) leaves no half folder.
    tokenizer_path = tokenizer_dir if tokenizer_dir is not None else described.tokenizer
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path) if tokenizer_path is not None else None
    if tokenizer is not None:
        check_tokenizer_fits(tokenizer, model.config, tokenizer_path)
    missing = [str(path) for path in results_files if not Path(path).is_file()]
    if missing:
        raise FileNotFoundError(f"results file(s) not found: {', '.join(missing)}")

    if out_dir.exists() and any(out_dir.iterdir()):
        # Never clear a folder here: it may be the model folder itself or hold other work.
        raise FileExistsError(f"{out_dir} is not empty; give a new or empty folder to write the upload into")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
        _drop_loading_options(out_dir / "tokenizer_config.json")

    text = saved_card_text(model_dir, text)  # the run's own title, training and settings, unless given anew
    card = model_card(out_dir, read_eval_results(model_dir, results_files), text, repo_id=repo_id)
    (out_dir / "README.md").write_text(card)
    return out_dir


# -- a Space of the demo app -------------------------------------------------------------------------

# What the Space's app shows: the demo app's tasks (hf_transformer.app.SERVES).
SPACE_SERVES = (SEQ2SEQ, CLASSIFICATION)

SPACE_APP = '''"""A Hugging Face Space: the hf_transformer demo app (hf_transformer.app) for {what}."""

from pathlib import Path

from hf_transformer.app import build_app

MODEL = {model!r}  # a folder beside this file, else a Hub repo id
HERE = Path(__file__).resolve().parent

demo = build_app(HERE / MODEL if (HERE / MODEL).is_dir() else MODEL)

if __name__ == "__main__":
    demo.launch()
'''

SPACE_README = """---
title: {title_json}
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
---

The hf_transformer demo app for {what}: `python app.py` runs it here too (`pip install -r requirements.txt`).
"""


def space_requirements(extras: Sequence[str] = ("demo",)) -> list[str]:
    """The package's requirements (it is copied beside the app, not installed) and those of its ``extras`` (gradio's:
    ``demo``), from its metadata."""
    required = metadata.requires("hf_transformer") or []
    plain = [req for req in required if "extra ==" not in req]
    extra = [
        req.split(";")[0].strip()
        for name in extras
        for req in required
        if re.search(rf"extra\s*==\s*['\"]{re.escape(name)}['\"]", req)
    ]
    return plain + extra


def _gradio_version(requirements: list[str]) -> str:
    try:
        return metadata.version("gradio")
    except metadata.PackageNotFoundError:
        for req in requirements:
            if (found := re.match(r"gradio\b.*?>=\s*([\w.]+)", req)) is not None:
                return found.group(1)
    raise metadata.PackageNotFoundError("gradio: install the demo extra")


# What a Space's folder holds: this function's files, and a clone of the Space's repository.
SPACE_FILES = {"app.py", "requirements.txt", "README.md", "hf_transformer", "model", ".git", ".gitattributes"}


def check_space_dir(output_dir) -> None:
    """Refuses a Space folder that holds anything a Space written here does not (``SPACE_FILES``: a new folder, an
    earlier Space, or a clone of the Space's repository are taken): a model folder's files, or a source tree whose
    ``hf_transformer/`` the Space's copy of the package would replace."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--space_dir {output_dir} is a file: give a new folder, or the Space's own")
    held = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
    foreign = [name for name in held if name not in SPACE_FILES]
    package = output_dir / "hf_transformer"
    if package.exists() and package.resolve() == Path(__file__).resolve().parent:
        foreign.insert(0, "hf_transformer (this package's own source)")
    if foreign:
        shown = ", ".join(foreign[:4]) + (", ..." if len(foreign) > 4 else "")
        raise ValueError(
            f"--space_dir {output_dir} holds what no Space written here does ({shown}): it would be mixed with the "
            "Space's files or written over; give a new folder, or the Space's own"
        )


def write_space(folder, output_dir) -> Path:
    """Writes a Hugging Face Space into ``output_dir``: ``app.py`` (builds the demo app of ``folder``),
    ``requirements.txt`` (the package's requirements and gradio), ``README.md`` (the Space's settings) and this
    package's source, which the Space runs as it is here. A local ``folder`` (one the app shows: a translation or
    classifier folder with its tokenizer, else a one-line refusal) is copied into ``output_dir/model`` (its files,
    not its subfolders such as checkpoints); anything else is a Hub repo id that the Space loads. Returns
    ``output_dir``."""
    output_dir = Path(output_dir)
    local = Path(folder).is_dir()
    if local:
        read_folder(folder, hub=False).check("the demo app", SPACE_SERVES, tokenizer=True)
        refuse_replacing(folder, output_dir, "model folder")
    elif looks_like_a_path(str(folder)):
        raise FileNotFoundError(f"No folder at {folder}.")
    check_space_dir(output_dir)
    # A folder whose tokenizer cuts Korean morphemes needs MeCab-ko in the Space too (a Hub id is not read here).
    requirements = space_requirements(("demo", "morphemes") if local and cuts_morphemes(folder) else ("demo",))
    output_dir.mkdir(parents=True, exist_ok=True)
    package = output_dir / "hf_transformer"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(Path(__file__).resolve().parent, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if local:
        model = output_dir / "model"
        model.mkdir(exist_ok=True)
        for path in sorted(Path(folder).iterdir()):
            if path.is_file():
                shutil.copy2(path, model / path.name)
        name, what = "model", f"the model folder {Path(folder).resolve().name} (copied into model/)"
    else:
        name, what = str(folder), f"the Hub model {folder}"
    (output_dir / "app.py").write_text(SPACE_APP.format(model=name, what=what), encoding="utf-8")
    (output_dir / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    title = (Path(folder).resolve().name if local else str(folder).rpartition("/")[2]) or "hf_transformer demo"
    (output_dir / "README.md").write_text(
        # JSON strings are YAML: a title with ": " or "#" in it stays one string.
        SPACE_README.format(title_json=json.dumps(title), gradio_version=_gradio_version(requirements), what=what),
        encoding="utf-8",
    )
    return output_dir


# -- uploading -----------------------------------------------------------------------------------------


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def check_can_upload(api: HfApi | None = None) -> str:
    """The token to upload with; raises ``HubError`` when offline, without a token, or when the Hub refuses the
    token or cannot be reached."""
    if _offline():
        raise HubError(
            "HF_HUB_OFFLINE is set, so nothing can be uploaded. Unset it to upload, or use --dry-run OUT_DIR "
            "to write the folder that would be uploaded."
        )
    token = get_token()
    if not token:
        raise HubError(
            "No Hugging Face token found. Log in with `hf auth login` or set HF_TOKEN to a token with write access."
        )
    api = api or HfApi()
    try:
        api.whoami(token=token)
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status == 401:
            raise HubError("The Hub rejected the token (401): log in again with `hf auth login`.") from error
        raise HubError(f"The Hub answered with an error before the upload: {error}") from error
    except Exception as error:  # the transport (httpx, requests, offline mode) and its errors differ by version
        raise HubError(
            f"Cannot reach the Hugging Face Hub ({type(error).__name__}: {error}); nothing was uploaded."
        ) from error
    return token


def upload(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str,
    private: bool = False,
    revision: str | None = None,
    commit_message: str = "Upload model",
    api: HfApi | None = None,
) -> str:
    """Create ``repo_id`` if needed (and the branch ``revision``) and upload ``folder`` in one commit."""
    api = api or HfApi()
    repo_url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, token=token, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        commit_message=commit_message,
        revision=revision,
        token=token,
    )
    return str(repo_url)
