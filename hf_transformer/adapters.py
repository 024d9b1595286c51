"""LoRA adapter folders (peft) on the way to deployment.

A folder written by ``PeftModel.save_pretrained`` holds the adapters (``adapter_config.json``,
``adapter_model.safetensors``) and names its base model; it is not a whole model, and no inference engine reads it.
:func:`merge_adapter` writes the whole model, the adapters merged into the base weights (peft's
``merge_and_unload``) with the tokenizer beside them, as an ordinary saved folder. ``Predictor.from_pretrained``,
``to_ctranslate2`` and ``to_onnx`` also take an adapter folder as it is and merge it first (in memory for the
predictor, into a temporary folder for the exports).

    from hf_transformer.adapters import merge_adapter

    merge_adapter("my-adapter", "my-model")  # then to_ctranslate2("my-model", ...), save_pretrained, the Hub

The task is the adapter's own (peft's ``task_type``: ``SEQ_2_SEQ_LM`` or ``SEQ_CLS``), else the base model's; the
tokenizer is the adapter folder's when it holds one (``Trainer`` saves it there), else the base model's.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

from .folders import ADAPTER_CONFIG, CLASSIFICATION, SEQ2SEQ, check_task, is_adapter_folder, refuse_replacing

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

__all__ = ["is_adapter_folder", "load_merged", "merge_adapter", "merged_model_folder"]


def _adapter_settings(adapter_dir: Path) -> dict:
    settings = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    if not settings.get("base_model_name_or_path"):
        raise ValueError(f"{adapter_dir / ADAPTER_CONFIG} names no base model (base_model_name_or_path is empty)")
    return settings


def load_merged(adapter_dir):
    """The model of ``adapter_dir`` with its adapters merged into the base weights (a plain model of this package,
    in eval mode), its tokenizer, and its task (``"seq2seq"`` or ``"classification"``)."""
    adapter_dir = Path(adapter_dir)
    settings = _adapter_settings(adapter_dir)
    try:
        import peft
    except ImportError as error:
        raise ImportError(f"{adapter_dir} holds a LoRA adapter ({ADAPTER_CONFIG}): reading it needs peft") from error

    base = settings["base_model_name_or_path"]
    task = {"SEQ_2_SEQ_LM": SEQ2SEQ, "SEQ_CLS": CLASSIFICATION}.get(settings.get("task_type"))
    if task is None:  # an adapter saved without a task type: the base model's own head (never a masked-token one)
        served = (SEQ2SEQ, CLASSIFICATION)
        task = check_task(AutoConfig.from_pretrained(base), base, f"the LoRA adapter {adapter_dir}", served)
    # The base model loaded by this package's Auto classes (peft's own Auto classes would import the module an
    # adapter without a task type names, which peft refuses for any library but transformers).
    auto = AutoModelForSequenceClassification if task == CLASSIFICATION else AutoModelForSeq2SeqLM
    model = peft.PeftModel.from_pretrained(auto.from_pretrained(base), str(adapter_dir))
    model = model.merge_and_unload().eval()
    has_tokenizer = any((adapter_dir / name).is_file() for name in TOKENIZER_FILES)
    tokenizer = AutoTokenizer.from_pretrained(str(adapter_dir) if has_tokenizer else base)
    return model, tokenizer, task


def merge_adapter(adapter_dir, output_dir) -> Path:
    """Writes the whole model of ``adapter_dir`` (adapters merged, tokenizer beside) to ``output_dir``, a folder
    every loader and exporter of this package reads; returns its path."""
    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    refuse_replacing(adapter_dir, output_dir, "adapter folder")
    model, tokenizer, _ = load_merged(adapter_dir)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


@contextlib.contextmanager
def merged_model_folder(adapter_dir, output_dir) -> Iterator[Path]:
    """For an exporter writing to ``output_dir``: a temporary folder holding the merged model of ``adapter_dir``,
    removed on exit. Refuses an ``output_dir`` that would replace the adapter folder."""
    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    refuse_replacing(adapter_dir, output_dir, "adapter folder")
    with tempfile.TemporaryDirectory(prefix="merged-") as merged:
        yield merge_adapter(adapter_dir, Path(merged) / "model")
