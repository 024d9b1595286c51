"""Checks of what a caller passes to the model: each wrong input is a ValueError that names the argument, its shape
or dtype, and what is expected, instead of a failure deep inside the model (or a silently wrong answer)."""

from __future__ import annotations

import difflib
import functools
import inspect

import torch

from .speed import capturing_graph

__all__ = [
    "check_token_inputs",
    "value_range",
    "check_ids_in_vocabulary",
    "check_sequence_fits",
    "check_prepared_mask",
    "check_no_misspelt_arguments",
]


def check_token_inputs(input_ids, inputs_embeds, name: str, embeds_name: str) -> None:
    """Exactly one of ids (B, L) integer or embeddings (B, L, D) float, with B and L at least 1: anything else is
    a ``ValueError`` that names the argument, instead of a failure deep inside the model."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Give exactly one of `{name}` and `{embeds_name}`.")
    given, argument, rank, what = (
        (input_ids, name, 2, "(batch, length) integer token ids")
        if input_ids is not None
        else (inputs_embeds, embeds_name, 3, "(batch, length, d_model) floating-point embeddings")
    )
    if not torch.is_tensor(given):
        raise ValueError(
            f"`{argument}` must be a torch.Tensor of {what}, got a {type(given).__name__}; "
            "convert it with torch.tensor(...) (a tokenizer does so with return_tensors='pt')."
        )
    if given.dim() != rank:
        hint = f"; for one sequence use `{argument}[None]`" if given.dim() == rank - 1 else ""
        raise ValueError(f"`{argument}` must be {rank}-D {what}, got shape {tuple(given.shape)}{hint}.")
    wanted_dtype = not given.is_floating_point() and not given.is_complex() if rank == 2 else given.is_floating_point()
    if not wanted_dtype or given.dtype == torch.bool:
        raise ValueError(f"`{argument}` must hold {what}, got dtype {given.dtype}.")
    if given.shape[0] == 0 or given.shape[1] == 0:
        raise ValueError(
            f"`{argument}` has shape {tuple(given.shape)}: an empty batch or an empty sequence; give at least one "
            "sequence of at least one token."
        )


def value_range(values: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor: one pass over it, one device sync."""
    low, high = torch.stack(torch.aminmax(values)).tolist()
    return low, high


def check_labels_in_range(labels: torch.Tensor, count: int) -> None:
    """Labels are ids in [0, count) -- of the output vocabulary, or of the classes -- or -100 (ignored): anything else
    raises, naming the range, in the fused and the plain loss alike (cross-entropy's own error names neither `labels`
    nor the range, and a negative label other than -100 would pick a wrong row in a gather). Skipped while a graph is
    captured, as for the ids."""
    if capturing_graph():
        return
    labelled = labels[labels != -100]
    if labelled.numel() == 0:
        return
    low, high = value_range(labelled)
    if low < 0 or high >= count:
        raise ValueError(f"`labels` must be in [0, {count}) or -100 (ignored), got values from {low} to {high}.")


def check_ids_in_vocabulary(input_ids: torch.Tensor, vocab_size: int) -> None:
    # A compiled graph cannot read the ids on the host without breaking in two, and a traced one would keep the
    # check's answer for its example; there the embedding kernel's own bounds check raises instead (an
    # index-out-of-bounds error on CPU, a device-side assert on CUDA).
    if input_ids.numel() == 0 or capturing_graph():
        return
    low, high = value_range(input_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"Token id {bad} is outside the vocabulary [0, {vocab_size}).")


def check_sequence_fits(length: int, positions: int | None) -> None:
    """A sequence of ``length`` tokens needs as many rows of the position table (the model's embeddings, and the
    engines that run an exported model, which would fail deep inside with an index out of range)."""
    if isinstance(positions, int) and length > positions:
        raise ValueError(
            f"Sequence length {length} exceeds the position table of {positions} positions "
            "(max_position_embeddings / decoder_max_position_embeddings); truncate the input."
        )


def check_prepared_mask(mask: torch.Tensor, expected: tuple[int, int, int, int]) -> None:
    """A 4-D self-attention mask (B or 1, 1, T, K): bool (True = may attend) or float (added to the scores)."""
    batch_size = expected[0]
    if mask.shape[0] not in (1, batch_size) or tuple(mask.shape[1:]) != expected[1:]:
        raise ValueError(
            f"The 4-D `decoder_attention_mask` has shape {tuple(mask.shape)}; expected {expected} "
            "(batch, 1, new target tokens, keys read: cached + new, or every slot of a static cache)."
        )
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(
            f"A 4-D `decoder_attention_mask` must be bool (True = may attend) or float (added to the scores), "
            f"got {mask.dtype}."
        )


def check_no_misspelt_arguments(forward, kwargs: dict) -> None:
    """``forward`` (a model class's function) takes ``**kwargs`` because transformers and the tools around it pass
    extras it does not use (``position_ids``, ``cache_position``, ``num_items_in_batch``...). That would also let a
    misspelt argument pass unnoticed (``attention_masks=...``: a mask never applied). A keyword that is a near-miss
    of one of the forward's own parameters raises ``TypeError``, as Python does for an unknown keyword."""
    for key in kwargs:
        meant = _near_miss(forward, key)
        if meant is not None:
            raise TypeError(
                f"{forward.__qualname__}() got an unexpected keyword argument '{key}' (did you mean '{meant}'?)"
            )


@functools.cache
def _near_miss(forward, key: str) -> str | None:
    parameters = [
        name
        for name, parameter in inspect.signature(forward).parameters.items()
        if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
    ]
    if key in parameters:
        return None
    if key == "encoder_attention_mask" and "attention_mask" in parameters:  # the source's mask, by another name
        return "attention_mask"
    close = difflib.get_close_matches(key, parameters, n=1, cutoff=0.8)
    return close[0] if close else None
