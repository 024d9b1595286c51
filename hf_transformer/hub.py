"""Sharing a model folder on the Hugging Face Hub.

``prepare_folder`` writes the folder that is uploaded: the weights (safetensors), ``config.json`` with
``auto_map``, the configuration and modeling source (so that the model loads with ``trust_remote_code=True``
where this package is not installed), the tokenizer, and a model card (``README.md``) with YAML metadata,
the evaluation results and a usage snippet. ``check_can_upload`` and ``upload`` push it with
``huggingface_hub``; ``scripts/push_to_hub.py`` is the command line.

``model_card`` is also the card the training scripts write into their output folders (a path in place of a
repository id): one function, so that a folder's card and its card on the Hub say the same things.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, get_token
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoTokenizer, GenerationConfig

from . import modeling_transformer
from .configuration_transformer import TransformerConfig

# What Trainer writes (all_results.json, eval_results.json) and what scripts/demo.py writes (results.json).
RESULT_FILES = ("all_results.json", "eval_results.json", "test_results.json", "results.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
DEFAULT_TAGS = ("hf_transformer", "encoder-decoder", "transformer", "custom_code")
DEFAULT_EXAMPLE = "Attention is all you need."
# Rows of the card's table of named metrics: prefix of the results keys -> split shown.
DEFAULT_RESULT_ROWS = {"eval": "validation", "test": "test"}

# Auto class and Hub pipeline tag of each head.
_HEADS = {
    "TransformerForConditionalGeneration": ("AutoModelForSeq2SeqLM", "text2text-generation"),
    "TransformerForSequenceClassification": ("AutoModelForSequenceClassification", "text-classification"),
    "TransformerForMaskedLM": ("AutoModelForMaskedLM", "fill-mask"),
    "TransformerModel": ("AutoModel", "feature-extraction"),
}


class HubError(RuntimeError):
    """Raised before anything is uploaded: no token, offline, or the Hub cannot be reached."""


# -- reading the model folder --------------------------------------------------------------------------


# Heads saved under an earlier name: scripts/pretrain_denoising.py defined the masked-LM head itself.
_RENAMED_HEADS = {"TransformerForMaskedTokens": "TransformerForMaskedLM"}


def architecture(config: TransformerConfig) -> str:
    """The head saved in the folder (``config.architectures``); a folder without one holds a seq2seq model."""
    for name in config.architectures or ():
        name = _RENAMED_HEADS.get(name, name)
        if name in _HEADS:
            return name
    return "TransformerForConditionalGeneration"


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
    """``tokenizer_dir`` if given, else the model folder when it holds tokenizer files, else None."""
    if tokenizer_dir is not None:
        return Path(tokenizer_dir)
    model_dir = Path(model_dir)
    return model_dir if any((model_dir / name).is_file() for name in TOKENIZER_FILES) else None


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
    A plain key that repeats a split's value (the training scripts' `bleu` is test2016's) is reported as that
    split's."""
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


def saved_generation(model) -> dict[str, Any]:
    """The beam-search settings ``model`` keeps as its generation defaults, where they differ from transformers'."""
    saved = getattr(model, "generation_config", None)
    if saved is None or architecture(model.config) != "TransformerForConditionalGeneration":
        return {}
    default = GenerationConfig()
    return {
        name: getattr(saved, name)
        for name in ("num_beams", "length_penalty")
        if getattr(saved, name) != getattr(default, name)
    }


# -- the model card ------------------------------------------------------------------------------------


def usage_snippet(
    repo_id: str,
    arch: str,
    config: TransformerConfig,
    has_tokenizer: bool,
    example: str,
    generation: Mapping[str, Any] | None = None,
) -> str:
    """Python code that loads the model from ``repo_id`` (a Hub id or a folder) and runs it; it needs only torch and
    transformers. A seq2seq model generates with ``generation``'s beam size and length penalty (default 4 beams)."""
    auto_class = _HEADS[arch][0]
    lines = []
    if has_tokenizer:
        lines += [
            f"from transformers import {auto_class}, AutoTokenizer",
            "",
            f"repo_id = {json.dumps(repo_id)}",
            "tokenizer = AutoTokenizer.from_pretrained(repo_id, trust_remote_code=True)",
            f"model = {auto_class}.from_pretrained(repo_id, trust_remote_code=True)",
            "",
            f'inputs = tokenizer([{json.dumps(example, ensure_ascii=False)}], return_tensors="pt")',
            'input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]',
        ]
    else:
        specials = {config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id}
        ids = [i for i in range(config.vocab_size) if i not in specials][:4]
        if config.eos_token_id is not None:
            ids.append(config.eos_token_id)
        lines += [
            "import torch",
            f"from transformers import {auto_class}",
            "",
            f"repo_id = {json.dumps(repo_id)}",
            f"model = {auto_class}.from_pretrained(repo_id, trust_remote_code=True)",
            "",
            "# token ids of the model's vocabulary (no tokenizer was published with it)",
            f"input_ids = torch.tensor([{ids}])",
            f"attention_mask = input_ids.ne({config.pad_token_id})",
        ]
    if arch == "TransformerForConditionalGeneration":
        # the start token and the new tokens must fit in the decoder's position table
        max_new_tokens = min(50, config.decoder_max_position_embeddings - 1)
        generation = generation or {}
        settings = f"num_beams={generation.get('num_beams', 4)}, "
        if "length_penalty" in generation:
            settings += f"length_penalty={generation['length_penalty']}, "
        lines.append(
            "output_ids = model.generate(input_ids, attention_mask=attention_mask, "
            f"{settings}max_new_tokens={max_new_tokens})"
        )
        if has_tokenizer:
            lines.append("print(tokenizer.batch_decode(output_ids, skip_special_tokens=True))")
        else:
            lines.append("print(output_ids.tolist())")
    elif arch == "TransformerForSequenceClassification":
        lines += [
            "logits = model(input_ids=input_ids, attention_mask=attention_mask).logits",
            "print(model.config.id2label[logits.argmax(-1).item()])",
        ]
    elif arch == "TransformerForMaskedLM":
        lines.append(
            "logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (1, length, vocabulary)"
        )
        if has_tokenizer:
            lines.append("print(tokenizer.batch_decode(logits.argmax(-1)))  # the likeliest token at every position")
        else:
            lines.append("print(logits.argmax(-1).tolist())  # the likeliest token at every position")
    else:
        lines += [
            "encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state",
            "print(encoded.shape)",
        ]
    return "\n".join(lines)


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


def _generation_line(generation: Mapping[str, Any]) -> str:
    names = {"num_beams": "beam size", "length_penalty": "length penalty"}
    settings = ", ".join(f"{names.get(name, name)} {value}" for name, value in generation.items())
    return f"Decoding: {settings} (the model's saved generation defaults)."


def model_card(
    repo_id: str,
    config: TransformerConfig,
    *,
    arch: str | None = None,
    num_parameters: int | None = None,
    results: Mapping[str, Any] | None = None,
    has_tokenizer: bool = True,
    license: str = "apache-2.0",
    language: Sequence[str] = (),
    tags: Sequence[str] = (),
    datasets: Sequence[str] = (),
    metrics: Sequence[str] = (),
    pipeline_tag: str | None = None,
    example: str = DEFAULT_EXAMPLE,
    title: str | None = None,
    training: str | None = None,
    evaluation: str | None = None,
    metric_columns: Mapping[str, str] | None = None,
    result_rows: Mapping[str, str] = DEFAULT_RESULT_ROWS,
    digits: int = 4,
    generation: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The text of ``README.md``: YAML metadata, a description, how the model was trained, its evaluation results
    and a usage snippet, for a Hub repository or a model folder (``repo_id`` is then the folder's path).

    ``metrics`` are the metric ids of the metadata (``model-index`` takes each one's plain, else test, else
    validation value from ``results``) and, unless ``metric_columns`` (metric -> heading, e.g. ``{"bleu": "BLEU
    (beam 4)", "bleu_lc_tok": "lc-tok BLEU"}``) names others, the columns of a table of named results, one row per
    split of ``result_rows`` (prefix of the results keys -> split shown), with ``digits`` decimals. Every scalar
    result is listed as well. ``title`` replaces the repository name as heading; ``training`` (the data, the
    initialisation) and ``settings`` (the run's arguments, shown as JSON) describe the training; ``evaluation``
    says how the metrics were computed; ``generation`` (``num_beams``, ``length_penalty``) gives the saved decoding
    settings, which the usage snippet uses.
    """
    arch = arch or architecture(config)
    auto_class, default_pipeline_tag = _HEADS[arch]
    pipeline_tag = pipeline_tag or default_pipeline_tag
    results = results or {}
    model_name = repo_id.rstrip("/").split("/")[-1]
    only_encoder = encoder_only(arch, config)

    eval_results = []
    if datasets:
        for metric in metrics:
            value, split = _metric_value(results, metric)
            if value is not None:
                eval_results.append(
                    EvalResult(
                        task_type=pipeline_tag,
                        dataset_type=datasets[0],
                        dataset_name=datasets[0],
                        dataset_split=split,
                        metric_type=metric,
                        metric_value=value,
                    )
                )
    default_tags = [tag for tag in DEFAULT_TAGS if not (only_encoder and tag == "encoder-decoder")]
    data = ModelCardData(
        license=license,
        language=list(language) or None,
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=list(dict.fromkeys([*default_tags, *tags])),
        datasets=list(datasets) or None,
        metrics=list(metrics) or None,
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
    )

    size = f"{num_parameters:,} parameters, " if num_parameters else ""
    what, layers = "The encoder of the Transformer", f"{config.encoder_layers} encoder layers"
    if not only_encoder:
        what = "An encoder-decoder Transformer"
        layers = f"{config.encoder_layers} encoder and {config.decoder_layers} decoder layers"
    description = (
        f"{what} (Vaswani et al., 2017, *Attention Is All You Need*), "
        f"`{arch}` ({auto_class}), built with `hf_transformer`: {size}d_model {config.d_model}, {layers}, "
        f"{config.num_attention_heads} heads of {config.head_dim}, feed-forward {config.intermediate_size}, "
        f"{config.layer_norm_position}-LN, {config.position_embedding_type} positions, "
        f"{config.activation_function}, vocabulary {config.vocab_size}."
    )

    sections = [f"# {title or model_name}", description]
    if training or settings:
        sections.append("## Training")
        if training:
            sections.append(training)
        if settings:
            sections.append(
                f"Settings:\n\n```json\n{json.dumps(settings, indent=2, ensure_ascii=False, default=str)}\n```"
            )

    sections.append("## Evaluation")
    if evaluation:
        sections.append(evaluation)
    if generation:
        sections.append(_generation_line(generation))
    listed = scalar_results(results)
    named = metric_table(results, metric_columns or {metric: metric for metric in metrics}, result_rows, digits)
    if named:
        sections.append(named)
    if listed:
        rows = "\n".join(f"| {key} | {_format_value(value)} |" for key, value in listed.items())
        sections.append(("All results:\n\n" if named else "") + f"| result | value |\n|---|---|\n{rows}")
    else:
        sections.append("Not evaluated: no results file was published with this model.")

    snippet = usage_snippet(repo_id, arch, config, has_tokenizer, example, generation)
    sections += [
        "## Usage",
        "The configuration and modeling code are saved beside the weights, so the model loads with `transformers` "
        "and\n`trust_remote_code=True` alone:",
        f"```python\n{snippet}\n```",
        "Where the `hf_transformer` package is installed, `import hf_transformer` registers the classes with the "
        "Auto\nclasses and `trust_remote_code` is not needed.",
    ]
    body = "\n\n".join(sections)
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}\n"))


# -- the folder that is uploaded ---------------------------------------------------------------------------


def prepare_folder(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    repo_id: str,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    results_files: Iterable[str | os.PathLike] = (),
    **card_options,
) -> Path:
    """Write into ``out_dir`` (new or empty) exactly what is uploaded to ``repo_id``.

    The model is loaded and saved again rather than copied, so the folder always carries the current code
    files and the full ``auto_map`` whatever version wrote ``model_dir``. ``card_options`` go to
    [`model_card`].
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} is not a model folder: it has no config.json")
    config = TransformerConfig.from_pretrained(model_dir)
    arch = architecture(config)
    model = getattr(modeling_transformer, arch).from_pretrained(model_dir)

    if out_dir.exists() and any(out_dir.iterdir()):
        # Never clear a folder here: it may be the model folder itself or hold other work.
        raise FileExistsError(f"{out_dir} is not empty; give a new or empty folder to write the upload into")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)

    tokenizer_path = find_tokenizer(model_dir, tokenizer_dir)
    if tokenizer_path is not None:
        AutoTokenizer.from_pretrained(tokenizer_path).save_pretrained(out_dir)
        _drop_loading_options(out_dir / "tokenizer_config.json")

    card_options.setdefault("generation", saved_generation(model))
    card = model_card(
        repo_id,
        model.config,
        arch=arch,
        num_parameters=model.num_parameters(),
        results=read_eval_results(model_dir, results_files),
        has_tokenizer=tokenizer_path is not None,
        **card_options,
    )
    (out_dir / "README.md").write_text(card)
    return out_dir


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
