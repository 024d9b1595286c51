"""What a folder on disk is: a saved model of which task, a peft adapter, a path rather than a Hub id.

A leaf module: it imports nothing else of the package, so that loading (``inference``), adapters and the exporters
can all ask these questions without importing each other.
"""

from __future__ import annotations

from pathlib import Path

CLASSIFICATION, SEQ2SEQ, MASKED_LM = "classification", "seq2seq", "masked-lm"
ADAPTER_CONFIG = "adapter_config.json"
# What each task's folder holds, as the refusals name it.
TASK_NAMES = {SEQ2SEQ: "translation (seq2seq)", CLASSIFICATION: "classification", MASKED_LM: "masked-token"}
# The saved class's name ends in one of these (`config.architectures`, written by `save_pretrained`).
_TASK_OF_CLASS = {
    "ForSequenceClassification": CLASSIFICATION,
    "ForMaskedLM": MASKED_LM,
    "ForConditionalGeneration": SEQ2SEQ,
    "ForSeq2SeqLM": SEQ2SEQ,
}

__all__ = [
    "ADAPTER_CONFIG",
    "CLASSIFICATION",
    "MASKED_LM",
    "SEQ2SEQ",
    "FolderTaskError",
    "check_task",
    "is_adapter_folder",
    "looks_like_a_path",
    "refuse_replacing",
    "task_of",
]


class FolderTaskError(ValueError):
    """A saved folder whose task (its saved class) the entry point it was given to does not serve."""


def task_of(config) -> str:
    """`classification`, `seq2seq` or `masked-lm`, from the class `config.architectures` names (a config saved
    without one that is an encoder-decoder is seq2seq); ``ValueError`` for another class, such as the headless
    `TransformerModel`."""
    names = config.architectures or []
    for name in names:
        for ending, task in _TASK_OF_CLASS.items():
            if name.endswith(ending):
                return task
    if not names and getattr(config, "is_encoder_decoder", False):
        return SEQ2SEQ
    raise ValueError(f"config.architectures is {names}: neither a translator, a classifier nor a masked-token model")


def check_task(config, folder, entry: str, served: tuple[str, ...]) -> str:
    """The task of ``folder`` (``config`` is its config) when ``entry`` serves it (``served``: tasks above); else
    :class:`FolderTaskError` in one line naming the folder, its saved class and what ``entry`` serves, so that a
    masked-token folder is never loaded as a translator with a decoder of random weights."""
    try:
        task = task_of(config)
    except ValueError:
        task = None
    if task in served:
        return task
    saved = ", ".join(config.architectures or []) or "a config without `architectures`"
    kind = f", a {TASK_NAMES[task]} model" if task else ", a model without a head"
    wanted = " and ".join(TASK_NAMES[name] for name in served)
    raise FolderTaskError(f"{folder} holds {saved}{kind}: {entry} serves {wanted} folders only.")


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
