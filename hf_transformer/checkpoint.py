"""Loading checks: a damaged or mismatched checkpoint raises instead of leaving weights at random values.

transformers already raises for an unreadable weights file (``SafetensorError``), a config.json that is
not JSON, and a tensor whose shape differs from the model's (unless ``ignore_mismatched_sizes=True``).
It only *logs* a report when a weight is missing from the checkpoint (the weight keeps its random
initialisation) or when the checkpoint holds weights the model has no place for (they are dropped).
Both happen when config.json and model.safetensors disagree on the number of layers, or when tensors
are renamed or lost. ``checked_from_pretrained`` turns them into errors, names the file, and also
rejects weights that are not finite (bytes overwritten inside the tensor data).

Loading one architecture from another's checkpoint (a classifier from a translation model, say) is a
deliberate fine-tuning start: the new head is initialised and the unused weights are dropped, with
transformers' report. That case is recognised by ``config.architectures`` naming another class.

Weights given explicitly (``from_pretrained(None, config=config, state_dict=weights)``, transformers' way to
build a model from some weights and initialise the rest) are loaded as transformers loads them: what the
dictionary lacks is initialised by ``_init_weights`` and reported, not refused; non-finite values still raise.
``ignore_mismatched_sizes=True`` re-initialises weights whose shapes differ, with transformers' own report.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class CheckpointError(OSError):
    """A checkpoint that cannot be loaded into the model faithfully."""


def _preview(keys, limit: int = 8) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def check_loading_info(model, loading_info: dict, source: str, complete_checkpoint: bool = True) -> None:
    """Raises ``CheckpointError`` when a weight was not loaded from the checkpoint, a checkpoint weight was not
    used, or a loaded weight is not finite. ``loading_info`` is what ``output_loading_info=True`` returns;
    mismatched shapes and state-dict errors have already raised in transformers by then. With
    ``complete_checkpoint=False`` (weights given as a partial state dict) only non-finite weights raise."""
    architectures = getattr(model.config, "architectures", None) or []
    same_architecture = not architectures or type(model).__name__ in architectures
    problems = []
    if same_architecture and complete_checkpoint:
        if loading_info.get("missing_keys"):
            problems.append(
                f"weights missing from the checkpoint (they would keep random values): "
                f"{_preview(loading_info['missing_keys'])}"
            )
        if loading_info.get("unexpected_keys"):
            problems.append(
                f"checkpoint weights the model has no place for: {_preview(loading_info['unexpected_keys'])}"
            )
    not_finite = [
        name
        for name, tensor in (*model.named_parameters(), *model.named_buffers())
        if tensor.is_floating_point() and tensor.device.type != "meta" and not torch.isfinite(tensor).all()
    ]
    if not_finite:
        problems.append(f"weights with NaN or infinite values (a corrupted file?): {_preview(not_finite)}")
    if problems:
        raise CheckpointError(
            f"{source} does not match {type(model).__name__} built from its config.json: "
            + "; ".join(problems)
            + ". Check that config.json belongs to these weights and that model.safetensors is complete."
        )


def checked_from_pretrained(load: Callable, cls: type, pretrained_model_name_or_path, *args, **kwargs):
    """``load`` is ``PreTrainedModel.from_pretrained`` bound to ``cls``; same arguments and return value."""
    want_info = kwargs.pop("output_loading_info", False)
    try:
        model, loading_info = load(pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs)
    except Exception as error:
        # Recognised by its module rather than imported: this file is copied beside the weights for remote
        # code, and the copies import nothing but torch, transformers and each other.
        if not type(error).__module__.startswith("safetensors"):
            raise
        raise CheckpointError(
            f"The weights file of {pretrained_model_name_or_path} is damaged (truncated or corrupted) and cannot "
            f"be read: {error}. Save or download it again."
        ) from error
    # A state dict given by the caller is the caller's choice of weights, often deliberately partial.
    complete_checkpoint = kwargs.get("state_dict") is None
    check_loading_info(model, loading_info, str(pretrained_model_name_or_path), complete_checkpoint)
    return (model, loading_info) if want_info else model
