"""What a saved class serves, and the words for it: the task of a class name, the one-line refusal of a folder an
entry point does not serve, a path rather than a Hub id, a peft adapter.

A leaf module: it imports nothing else of the package. Saved translation folders carry it beside their pipeline
(:mod:`hf_transformer.pipelines`), and :mod:`hf_transformer.saved_folder`, which reads a whole folder, asks it.
"""

from __future__ import annotations

from pathlib import Path

CLASSIFICATION, SEQ2SEQ, MASKED_LM = "classification", "seq2seq", "masked-lm"
ADAPTER_CONFIG = "adapter_config.json"
# A saved model's weights, in one file or sharded (``save_pretrained``), or as torch's pickle (older folders).
WEIGHTS_FILE, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
# What each task's folder holds, as the refusals name it.
TASK_NAMES = {SEQ2SEQ: "translation (seq2seq)", CLASSIFICATION: "classification", MASKED_LM: "masked-token"}
# The saved class's name ends in one of these (`config.architectures`, written by `save_pretrained`).
_TASK_OF_CLASS = {
    "ForSequenceClassification": CLASSIFICATION,
    "ForMaskedLM": MASKED_LM,
    "ForMaskedTokens": MASKED_LM,  # the masked-LM head's earlier name (scripts/pretrain_denoising.py defined it)
    "ForConditionalGeneration": SEQ2SEQ,
    "ForSeq2SeqLM": SEQ2SEQ,
}

__all__ = [
    "ADAPTER_CONFIG",
    "TORCH_WEIGHTS",
    "WEIGHTS_FILE",
    "WEIGHTS_INDEX",
    "CLASSIFICATION",
    "MASKED_LM",
    "SEQ2SEQ",
    "FolderTaskError",
    "check_task",
    "is_adapter_folder",
    "looks_like_a_path",
    "refusal",
    "refuse_replacing",
    "check_output_file",
    "saved_model_config",
    "task_of",
]


class FolderTaskError(ValueError):
    """A saved folder whose task (its saved class) the entry point it was given to does not serve."""


def task_of(architectures, is_encoder_decoder: bool = False) -> str:
    """`classification`, `seq2seq` or `masked-lm`, from the saved class names (``config.architectures``); without
    any, an encoder-decoder (``is_encoder_decoder``: a config saved on its own) is seq2seq. ``ValueError`` for
    another class, such as the headless `TransformerModel`."""
    names = list(architectures or [])
    for name in names:
        for ending, task in _TASK_OF_CLASS.items():
            if name.endswith(ending):
                return task
    if not names and is_encoder_decoder:
        return SEQ2SEQ
    raise ValueError(f"config.architectures is {names}: neither a translator, a classifier nor a masked-token model")


def check_task(architectures, folder, entry: str, served: tuple[str, ...], *, is_encoder_decoder: bool = False) -> str:
    """The task of ``folder`` (``architectures``, ``is_encoder_decoder``: its saved class, as for :func:`task_of`)
    when ``entry`` serves it (``served``: tasks above); else :class:`FolderTaskError` in one line (:func:`refusal`),
    so that a masked-token folder is never loaded as a translator with a decoder of random weights."""
    try:
        task = task_of(architectures, is_encoder_decoder)
    except ValueError:
        task = None
    if task in served:
        return task
    saved = ", ".join(architectures or []) or "a config without `architectures`"
    raise refusal(folder, saved, task, entry, served)


def refusal(folder, saved: str, task: str | None, entry: str, served: tuple[str, ...]) -> FolderTaskError:
    """The error, in one line, for ``folder`` (which holds ``saved``, of ``task``, None for none) given to ``entry``,
    which serves the tasks ``served``: it names the folder, its saved class and what ``entry`` serves."""
    kind = f", a {TASK_NAMES[task]} model" if task else ", a model without a head"
    wanted = " and ".join(TASK_NAMES[name] for name in served)
    return FolderTaskError(f"{folder} holds {saved}{kind}: {entry} serves {wanted} folders only.")


def looks_like_a_path(name: str) -> bool:
    """A Hub id is `name` or `owner/name`; anything else (`./runs/x`, `runs/a/b`, `~/x`) can only be a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def is_adapter_folder(folder) -> bool:
    """Whether ``folder`` holds a peft adapter rather than a whole model."""
    folder = Path(folder)
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def saved_model_config(folder) -> str | None:
    """The file that makes ``folder`` a saved model (``config.json``) or adapter (``adapter_config.json``), or None:
    a file written there could change what the folder loads."""
    return next((name for name in ("config.json", ADAPTER_CONFIG) if (Path(folder) / name).is_file()), None)


# Files that mark a saved model's (or adapter's) weights: a folder holding one is a model that loads.
_SAVED_WEIGHTS = (WEIGHTS_FILE, WEIGHTS_INDEX, TORCH_WEIGHTS, ADAPTER_CONFIG)


def refuse_replacing(source_dir, output_dir, what: str) -> None:
    """Raises before an export writes ``output_dir`` over what it reads: ``source_dir`` itself or a folder holding it
    (``what`` names the source in the message: "model folder", "adapter folder"), or over another saved model (its
    weights there; an export with ``--force`` replaces an earlier export, never a model)."""
    source, output = Path(source_dir).resolve(), Path(output_dir).resolve()
    if output == source or output in source.parents:
        raise ValueError(f"The output folder {output_dir} would replace the {what} {source_dir}.")
    held = [name for name in _SAVED_WEIGHTS if (output / name).is_file()]
    if held:
        raise ValueError(
            f"The output folder {output_dir} holds a saved model ({held[0]}): writing there would replace its files; "
            "give a new folder, or an earlier export's"
        )


def check_output_file(path, option: str = "--output", inputs=()) -> Path:
    """Refuses, before any work, a file a command would write where it would destroy something: a folder, one of the
    command's ``inputs`` (files it reads), or a file already in a model or adapter folder (its config, weights,
    tokenizer, code or card: the folder would no longer load as it was). A new file beside a model's is taken.
    Returns ``path``."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a folder; give the file to write")
    resolved = path.resolve()
    for source in inputs:
        if source is not None and Path(source).resolve() == resolved:
            raise ValueError(f"{option} {path} is the file this command reads; give another file to write")
    folder = resolved.parent
    if path.exists() and saved_model_config(folder):
        raise ValueError(
            f"{option} {path} is a file of the saved model in {path.parent}: writing it would change what the "
            "folder loads; give a file outside the folder, or a new name"
        )
    return path
