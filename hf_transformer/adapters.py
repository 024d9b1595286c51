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
tokenizer is the adapter folder's when it holds one (``Trainer`` saves it there), else the base model's. Reading and
opening an adapter folder is :mod:`hf_transformer.saved_folder`'s.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .folders import ADAPTER_CONFIG, CLASSIFICATION, SEQ2SEQ, is_adapter_folder, refuse_replacing
from .saved_folder import ADAPTER, FolderError, read_folder

__all__ = ["is_adapter_folder", "merge_adapter", "merged_model_folder"]


def merge_adapter(adapter_dir, output_dir) -> Path:
    """Writes the whole model of ``adapter_dir`` (adapters merged, tokenizer beside) to ``output_dir``, a folder
    every loader and exporter of this package reads; returns its path."""
    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    refuse_replacing(adapter_dir, output_dir, "adapter folder")
    folder = read_folder(adapter_dir, hub=False)
    if folder.kind != ADAPTER:
        raise FolderError(f"{adapter_dir} holds no LoRA adapter ({ADAPTER_CONFIG})")
    model, tokenizer = folder.open("merge_adapter", (SEQ2SEQ, CLASSIFICATION))
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
