"""What a saved folder holds, read once, and how an entry point opens it.

    from hf_transformer.folders import CLASSIFICATION, SEQ2SEQ
    from hf_transformer.saved_folder import read_folder

    folder = read_folder("runs/en-de")  # kind, head and task, Auto class, tokenizer, base model, weights
    model, tokenizer = folder.open("Predictor", (SEQ2SEQ, CLASSIFICATION))  # eval mode

A folder is of one of three kinds. A *model* folder is what ``save_pretrained`` writes (``config.json``, read by
``AutoConfig``; the weights; the tokenizer beside them); a name that is no path on this machine is a Hub repo id, read
as a model folder. An *adapter* folder holds peft's LoRA adapters
(``adapter_config.json`` and no ``config.json``) and names its base model; opening it merges the adapters into the
base weights (peft's ``merge_and_unload``). A *CTranslate2* folder is what ``to_ctranslate2`` writes
(``model.bin``, the model's configuration in ``transformer_config.json``); only CTranslate2 decodes it.

The head is the saved class (``config.architectures``) where it is one of this package's; the task (``seq2seq``,
``classification``, ``masked-lm``) is the saved class's (:func:`hf_transformer.folders.task_of`); an adapter's is its
peft ``task_type`` (``SEQ_2_SEQ_LM``, ``SEQ_CLS``), else its base model's. The tokenizer is the folder's own where it
holds ``tokenizer.json`` or ``tokenizer_config.json`` (``AutoTokenizer`` reads it, whatever its class), an adapter's
otherwise its base model's. An entry point names the tasks it serves (:meth:`SavedFolder.check`,
:meth:`SavedFolder.open`) and refuses any other folder in one line (:class:`hf_transformer.folders.FolderTaskError`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from .folders import (
    ADAPTER_CONFIG,
    CLASSIFICATION,
    MASKED_LM,
    SEQ2SEQ,
    TORCH_WEIGHTS,
    WEIGHTS_FILE,
    WEIGHTS_INDEX,
    looks_like_a_path,
    refusal,
    task_of,
)

__all__ = [
    "ADAPTER",
    "CTRANSLATE2",
    "MODEL",
    "FolderError",
    "SavedFolder",
    "read_folder",
    "tokenizer_place",
    "weight_files",
]

logger = logging.getLogger(__name__)

MODEL, ADAPTER, CTRANSLATE2 = "model", "adapter", "ctranslate2"
CONFIG_FILE = "config.json"
CTRANSLATE2_WEIGHTS = "model.bin"
# A CTranslate2 folder's config.json is CTranslate2's own; the model's configuration is kept beside it under this name.
CTRANSLATE2_MODEL_CONFIG = "transformer_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")

# This package's heads and the Auto class that loads each.
HEADS = {
    "TransformerForConditionalGeneration": "AutoModelForSeq2SeqLM",
    "TransformerForSequenceClassification": "AutoModelForSequenceClassification",
    "TransformerForMaskedLM": "AutoModelForMaskedLM",
    "TransformerModel": "AutoModel",
}
_HEAD_OF_TASK = {
    SEQ2SEQ: "TransformerForConditionalGeneration",
    CLASSIFICATION: "TransformerForSequenceClassification",
    MASKED_LM: "TransformerForMaskedLM",
}
# Heads saved under an earlier name: scripts/pretrain_denoising.py defined the masked-LM head itself.
_RENAMED_HEADS = {"TransformerForMaskedTokens": "TransformerForMaskedLM"}
_ADAPTER_TASKS = {"SEQ_2_SEQ_LM": SEQ2SEQ, "SEQ_CLS": CLASSIFICATION}


class FolderError(FileNotFoundError, ValueError):
    """A path that holds nothing an entry point can open (no folder, a file, a folder without ``config.json``, an
    unreadable configuration, an adapter without a base model, no tokenizer where one is needed), in one line. It
    is a ``FileNotFoundError`` and a ``ValueError``, so that either kind of handler reports it."""


@dataclass(frozen=True)
class SavedFolder:
    """A saved folder as :func:`read_folder` read it.

    ``path``: the folder (or Hub repo id) as given; ``kind``: ``MODEL``, ``ADAPTER`` or ``CTRANSLATE2``;
    ``architectures``: the saved class names (an adapter's: its base model's); ``head``: this package's class the
    folder loads as (None for a class not of this package); ``task``: what the saved class does (None for a model
    without a head); ``auto_class``: the name of the ``transformers`` Auto class that loads it; ``tokenizer``: the
    folder holding its tokenizer (None if none was saved); ``base_model``: an adapter's base model; ``weights``: the
    weight files in the folder (empty for a Hub id); ``saved``: what the folder holds, as a refusal names it."""

    path: str
    kind: str
    architectures: tuple[str, ...]
    model_type: str | None
    head: str | None
    task: str | None
    auto_class: str | None
    tokenizer: str | None
    base_model: str | None
    weights: tuple[str, ...]
    saved: str

    def check(self, entry: str, serves: tuple[str, ...], *, tokenizer: bool = False) -> str:
        """The folder's task when ``entry`` serves it (``serves``: tasks of :mod:`hf_transformer.folders`), else
        ``FolderTaskError`` in one line naming the folder, what it holds and what ``entry`` serves. With
        ``tokenizer``, a folder without a tokenizer is refused too (:class:`FolderError`)."""
        if self.task not in serves:
            raise refusal(self.path, self.saved, self.task, entry, serves)
        if tokenizer and self.tokenizer is None:
            raise FolderError(f"{self.path} has no tokenizer (tokenizer.json): save the tokenizer into it")
        return self.task

    def open(self, entry: str, serves: tuple[str, ...], **load_options):
        """The model (eval mode; ``load_options`` go to ``from_pretrained``) and its tokenizer, for ``entry``, which
        serves the tasks ``serves`` (:meth:`check`)."""
        self.check(entry, serves, tokenizer=True)
        return self.load_model(**load_options), self.load_tokenizer()

    def load_model(self, **load_options):
        """The model, in eval mode, by its Auto class; an adapter's merged into its base model's weights."""
        if self.kind == CTRANSLATE2:
            raise ValueError(
                f"{self.path} holds a CTranslate2 model: only CTranslate2 decodes it (engine='ctranslate2')"
            )
        if self.auto_class is None:
            raise refusal(self.path, self.saved, self.task, "loading", tuple(_HEAD_OF_TASK))
        import transformers

        auto = getattr(transformers, self.auto_class)
        if self.kind == MODEL:
            return auto.from_pretrained(self.path, **load_options).eval()
        try:
            import peft
        except ImportError as error:
            raise ImportError(f"{self.path} holds a LoRA adapter ({ADAPTER_CONFIG}): reading it needs peft") from error
        # The base model loaded by this package's Auto classes (peft's own Auto classes would import the module an
        # adapter without a task type names, which peft refuses for any library but transformers).
        try:
            if self.task == CLASSIFICATION and "num_labels" not in load_options and "config" not in load_options:
                load_options = {**load_options, **self._adapter_label_count()}
            base_model, loading = auto.from_pretrained(self.base_model, output_loading_info=True, **load_options)
        except OSError as error:  # a base named like a Hub id that is neither a folder here nor on the Hub
            if Path(self.base_model).exists():
                raise
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise FolderError(f"{_missing_base(self.path, self.base_model)}; as a Hub id: {first}") from error
        self._check_adapter_completes(loading["missing_keys"])
        try:
            adapted = peft.PeftModel.from_pretrained(base_model, self.path)
        except RuntimeError as error:  # torch's load_state_dict: the adapter was trained on a model of other sizes
            if "size mismatch" not in str(error):
                raise
            first = next(line.strip() for line in str(error).splitlines() if "size mismatch" in line)
            raise FolderError(
                f"{self.path} is a LoRA adapter trained on a model of other sizes than {self.base_model} ({first}): "
                f"give it the base folder it was trained on (base_model_name_or_path in {ADAPTER_CONFIG})"
            ) from error
        return adapted.merge_and_unload().eval()

    def _check_adapter_completes(self, missing_from_base) -> None:
        """Refuses an adapter whose model needs weights its base folder lacks and the adapter does not hold (a
        translation adapter on a masked-token or classifier base: the decoder would be random at every load). A
        classifier adapter on a pretrained encoder holds its head (peft saves the modules it trains in full)."""
        if not missing_from_base:
            return
        held = set()
        for name in ADAPTER_WEIGHTS:
            path = Path(self.path, name)
            if path.is_file() and path.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(path), "pt") as saved:
                    held = set(saved.keys())
            elif path.is_file():
                import torch

                held = set(torch.load(path, map_location="meta", weights_only=True))
            if held:
                break
        lacking = sorted(key for key in missing_from_base if f"base_model.model.{key}" not in held)
        if lacking:
            raise FolderError(
                f"{self.path} is a LoRA adapter ({self.task}) on {self.base_model}, which lacks {len(lacking)} of the "
                f"weights that model needs ({', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}), and the "
                "adapter does not hold them: they would be drawn at random at every load. Train the adapter on a base "
                "folder of this task, or save those modules with it (peft's modules_to_save)"
            )

    def _adapter_label_count(self) -> dict:
        """For a classifier adapter whose head (trained in full, saved beside the adapters) has another number of
        labels than its base model's config: the loading options that build the base with that many (an adapter folder
        keeps no label names: they are transformers' LABEL_i)."""
        weights = Path(self.path, ADAPTER_WEIGHTS[0])
        if not weights.is_file():
            return {}
        from safetensors import safe_open

        with safe_open(str(weights), "pt") as saved:
            heads = [saved.get_slice(key).get_shape()[0] for key in saved.keys() if key.endswith("classifier.weight")]
        base_labels = self._base_config().num_labels
        if len(heads) != 1 or heads[0] == base_labels:
            return {}
        logger.warning(
            "%s trains a classifier of %d labels on %s, whose config has %d: its labels are named LABEL_0 .. LABEL_%d "
            "(an adapter folder keeps no label names)",
            self.path, heads[0], self.base_model, base_labels, heads[0] - 1,
        )  # fmt: skip
        return {"num_labels": heads[0], "ignore_mismatched_sizes": True}

    def _base_config(self):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.base_model)

    def load_tokenizer(self):
        if self.tokenizer is None:
            raise FolderError(f"{self.path} has no tokenizer (tokenizer.json): save the tokenizer into it")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.tokenizer)

    def load_config(self):
        """The model's configuration (a CTranslate2 folder's, from the file kept beside CTranslate2's own)."""
        if self.kind == CTRANSLATE2:
            from .configuration_transformer import TransformerConfig

            return TransformerConfig.from_json_file(Path(self.path) / CTRANSLATE2_MODEL_CONFIG)
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.base_model if self.kind == ADAPTER else self.path)

    def load_generation_config(self):
        """The folder's saved generation settings, else transformers' defaults."""
        from transformers import GenerationConfig

        if Path(self.path, "generation_config.json").is_file():
            return GenerationConfig.from_pretrained(self.path)
        return GenerationConfig()


def read_folder(folder, *, hub: bool = True) -> SavedFolder:
    """The :class:`SavedFolder` of ``folder`` (a path, or, with ``hub``, a Hub repo id; an adapter's base model may be
    either); a ``SavedFolder`` is returned as it is. Raises :class:`FolderError` in one line for a path that holds no
    saved model, adapter or CTranslate2 model."""
    if isinstance(folder, SavedFolder):
        return folder
    name, path = str(folder), Path(folder)
    if not path.exists():
        if not hub or looks_like_a_path(name):  # transformers would say "a malformed repo id"
            raise FolderError(f"No folder at {name}.")
        try:
            described = _config(name)
        except OSError as error:  # offline, or no such repo: transformers' paragraph, in one line
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise FolderError(f"No folder at {name}, and no Hub model of that id loads ({reason})") from error
        return _model(name, described, (), tokenizer=name)
    if not path.is_dir():
        raise FolderError(f"{name} is a file, not a model folder")
    if (path / CTRANSLATE2_WEIGHTS).is_file() and (path / CTRANSLATE2_MODEL_CONFIG).is_file():
        described = _model(name, _read_json(path / CTRANSLATE2_MODEL_CONFIG, name), (CTRANSLATE2_WEIGHTS,))
        return replace(described, kind=CTRANSLATE2)
    if (path / CONFIG_FILE).is_file():
        return _model(name, _config(name), weight_files(path))
    if (path / ADAPTER_CONFIG).is_file():
        return _adapter(name, _read_json(path / ADAPTER_CONFIG, name))
    raise FolderError(f"{name} is not a model folder: it has no {CONFIG_FILE}")


def tokenizer_place(folder) -> str | None:
    """``folder`` when it holds a saved tokenizer (``tokenizer.json`` or ``tokenizer_config.json``), else None."""
    return str(folder) if any(Path(folder, name).is_file() for name in TOKENIZER_FILES) else None


def weight_files(folder) -> tuple[str, ...]:
    """The model weight files of ``folder``: ``model.safetensors``, or the shards its index names, else
    ``pytorch_model.bin``; none for a folder without them."""
    folder = Path(folder)
    if (folder / WEIGHTS_FILE).is_file():
        return (WEIGHTS_FILE,)
    if (folder / WEIGHTS_INDEX).is_file():
        return tuple(sorted(set(_read_json(folder / WEIGHTS_INDEX, str(folder))["weight_map"].values())))
    return (TORCH_WEIGHTS,) if (folder / TORCH_WEIGHTS).is_file() else ()


# -- reading ---------------------------------------------------------------------------------------------------


def _read_json(path: Path, folder: str) -> dict:
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise FolderError(f"{folder}/{path.name} cannot be read: {str(error).splitlines()[0]}") from error
    if not isinstance(settings, dict):
        raise FolderError(f"{folder} is not a model folder: its {path.name} does not read as a JSON object")
    return settings


def _config(folder: str) -> dict:
    """What the saved class is, from the configuration as ``AutoConfig`` reads it (with its class's defaults, and its
    checks: a setting no model can have raises here, in the configuration's words)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    return {
        "architectures": config.architectures,
        "is_encoder_decoder": config.is_encoder_decoder,
        "model_type": config.model_type,
    }


def _head(architectures: tuple[str, ...], task: str | None) -> str | None:
    for name in architectures:
        name = _RENAMED_HEADS.get(name, name)
        if name in HEADS:
            return name
    return None if architectures else _HEAD_OF_TASK.get(task)  # a config saved without a model: its task's head


def _model(path: str, config: dict, weights: tuple[str, ...], tokenizer: str | None = None) -> SavedFolder:
    architectures = tuple(config.get("architectures") or ())
    try:
        task = task_of(architectures, bool(config.get("is_encoder_decoder")))
    except ValueError:
        task = None
    head = _head(architectures, task)
    return SavedFolder(
        path=path,
        kind=MODEL,
        architectures=architectures,
        model_type=config.get("model_type"),
        head=head,
        task=task,
        auto_class=HEADS.get(head) if head else _auto_class_of(task),
        tokenizer=tokenizer or tokenizer_place(path),
        base_model=None,
        weights=weights,
        saved=", ".join(architectures) or "a config without `architectures`",
    )


def _adapter(path: str, settings: dict) -> SavedFolder:
    base = settings.get("base_model_name_or_path")
    if not base:
        raise FolderError(f"{path}/{ADAPTER_CONFIG} names no base model (base_model_name_or_path is empty)")
    if looks_like_a_path(str(base)) and not Path(base).exists():
        raise FolderError(_missing_base(path, base))
    task_type = settings.get("task_type")
    if task_type in _ADAPTER_TASKS:
        task, architectures, model_type = _ADAPTER_TASKS[task_type], (), None
        saved = f"a LoRA adapter ({task_type})"
    else:  # an adapter saved without a task type: its base model's own head (a folder, or a Hub id)
        of_base = read_folder(base)
        task, architectures, model_type = of_base.task, of_base.architectures, of_base.model_type
        saved = f"a LoRA adapter on {of_base.saved}"
    head = _HEAD_OF_TASK.get(task)
    return SavedFolder(
        path=path,
        kind=ADAPTER,
        architectures=architectures,
        model_type=model_type,
        head=head,
        task=task,
        auto_class=HEADS.get(head),
        tokenizer=tokenizer_place(path) or str(base),  # Trainer saves the tokenizer with the adapter
        base_model=str(base),
        weights=tuple(name for name in ADAPTER_WEIGHTS if Path(path, name).is_file()),
        saved=saved,
    )


def _missing_base(path: str, base: str) -> str:
    return (
        f"{path} is a LoRA adapter on {base}, which is not a folder here (a relative path is read from the working "
        f"directory): run from where it was trained, or set base_model_name_or_path in {path}/{ADAPTER_CONFIG}"
    )


def _auto_class_of(task: str | None) -> str | None:
    return HEADS.get(_HEAD_OF_TASK.get(task, ""))
