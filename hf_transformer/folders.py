"""What a folder on disk is: a saved model of which task, a peft adapter, a path rather than a Hub id.

A leaf module: it imports nothing else of the package, so that loading (``inference``), adapters and the exporters
can all ask these questions without importing each other.
"""

from __future__ import annotations

from pathlib import Path

CLASSIFICATION, SEQ2SEQ = "classification", "seq2seq"
ADAPTER_CONFIG = "adapter_config.json"

__all__ = [
    "ADAPTER_CONFIG",
    "CLASSIFICATION",
    "SEQ2SEQ",
    "is_adapter_folder",
    "looks_like_a_path",
    "refuse_replacing",
    "task_of",
]


def task_of(config) -> str:
    """`classification` or `seq2seq`, from `config.architectures` (an encoder-decoder config without one is seq2seq)."""
    names = config.architectures or []
    if any(name.endswith("ForSequenceClassification") for name in names):
        return CLASSIFICATION
    if any(name.endswith(("ForConditionalGeneration", "ForSeq2SeqLM")) for name in names) or getattr(
        config, "is_encoder_decoder", False
    ):
        return SEQ2SEQ
    raise ValueError(f"cannot tell a classifier from a translator: config.architectures is {names}")


def looks_like_a_path(name: str) -> bool:
    """A Hub id is `name` or `owner/name`; anything else (`./runs/x`, `runs/a/b`, `~/x`) can only be a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def is_adapter_folder(folder) -> bool:
    """Whether ``folder`` holds a peft adapter rather than a whole model."""
    folder = Path(folder)
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def refuse_replacing(source_dir, output_dir, what: str) -> None:
    """Raises before an export writes ``output_dir`` over what it reads: ``source_dir`` itself or a folder holding it
    (``what`` names the source in the message: "model folder", "adapter folder")."""
    source, output = Path(source_dir).resolve(), Path(output_dir).resolve()
    if output == source or output in source.parents:
        raise ValueError(f"The output folder {output_dir} would replace the {what} {source_dir}.")
