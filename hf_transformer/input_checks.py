"""Checks of what a caller passes to the model: each wrong input is a ValueError that names the argument, its shape
or dtype, and what is expected, instead of a failure deep inside the model (or a silently wrong answer)."""

from __future__ import annotations

import difflib
import functools
import inspect

import torch
from transformers.utils import TransformersKwargs

from .speed import capturing_graph

__all__ = [
    "check_token_inputs",
    "check_mask_values",
    "value_range",
    "check_ids_in_vocabulary",
    "check_sequence_fits",
    "check_prepared_mask",
    "check_no_misspelt_arguments",
    "check_padding_mask",
    "check_seq2seq_inputs",
    "check_decoder_inputs",
    "check_decoder_attention_mask",
    "check_target_labels",
    "classification_problem",
]


def check_token_inputs(input_ids, inputs_embeds, name: str, embeds_name: str) -> None:
    """Exactly one of ids (B, L) integer or embeddings (B, L, D) float, with B and L at least 1: anything else is
    a ``ValueError`` that names the argument, instead of a failure deep inside the model."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Give exactly one of `{name}` and `{embeds_name}`.")
    given, argument, rank, what = (
        (input_ids, name, 2, "(batch, length) token ids of int64 or int32")
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
    # Ids of the two integer types an embedding looks up (uint8 or int16 ids would fail inside it).
    wanted_dtype = given.dtype in (torch.int32, torch.int64) if rank == 2 else given.is_floating_point()
    if not wanted_dtype:
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


def check_sequence_fits(length: int | torch.Tensor, positions: int | None) -> None:
    """A sequence of ``length`` tokens needs as many rows of the position table (the model's embeddings, and the
    engines that run an exported model, which would fail deep inside with an index out of range). ``length`` is a
    0-d tensor over a static cache: a captured graph cannot read it on the host without breaking, and there the
    embedding kernel's own bounds check raises instead."""
    if capturing_graph():
        return
    length = int(length)
    if isinstance(positions, int) and length > positions:
        raise ValueError(
            f"Sequence length {length} exceeds the position table of {positions} positions "
            "(max_position_embeddings / decoder_max_position_embeddings); truncate the input "
            "(`truncation=True` in the tokenizer's or the text-classification pipeline's call keeps its first tokens, "
            f"as many as the tokenizer's `model_max_length`: where that is above {positions}, set it to {positions} "
            f"or pass `max_length={positions}` too)."
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
    of one of the forward's own parameters, or of the keywords transformers hands every forward through its
    ``**kwargs`` (``TransformersKwargs``: ``output_attentions``, ``output_hidden_states``...), raises ``TypeError``, as
    Python does for an unknown keyword. Skipped while a graph is captured (a compiled decoding step), which would
    trace the lookup of the names."""
    if capturing_graph():
        return
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
    parameters += [name for name in (*TransformersKwargs.__annotations__, "return_dict") if name not in parameters]
    if key in parameters:
        return None
    if key == "encoder_attention_mask" and "attention_mask" in parameters:  # the source's mask, by another name
        return "attention_mask"
    close = difflib.get_close_matches(key, parameters, n=1, cutoff=0.8)
    return close[0] if close else None


def check_padding_mask(mask: torch.Tensor, name: str, tokens: torch.Tensor | None, tokens_name: str) -> None:
    """A padding mask is 2-D (batch, length), covers the tokens it masks, ``tokens`` (B, L) or (B, L, D), and holds
    0 and 1 (or booleans)."""
    if tokens is not None and tuple(mask.shape) != tuple(tokens.shape[:2]):
        raise ValueError(
            f"`{name}` has shape {tuple(mask.shape)} but {tokens_name} has (batch, length) "
            f"{tuple(tokens.shape[:2])}; they must match."
        )
    if mask.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (batch, length), got shape {tuple(mask.shape)}.")
    check_mask_values(mask, name)


def check_mask_values(mask: torch.Tensor, name: str) -> None:
    """A 2-D mask holds 1 for real tokens and 0 for padding, or booleans. The model reads it as True where nonzero,
    so an additive mask (0 for real tokens, -inf for padding) would be read inverted. Skipped while a graph is
    captured, which cannot read the values on the host without breaking in two."""
    if mask.dtype != torch.bool and not capturing_graph() and not ((mask == 0) | (mask == 1)).all():
        raise ValueError(
            f"`{name}` must hold 1 for real tokens and 0 for padding (or True / False), got other values; an "
            "additive mask (0 and -inf) is not a padding mask."
        )


def check_seq2seq_inputs(
    decoder, input_ids, inputs_embeds, encoder_outputs, decoder_input_ids, decoder_inputs_embeds
) -> None:
    """The encoder-decoder without a head: a decoder, a source (or its encoder output), and a decoder input, which
    it has no labels to derive from."""
    if decoder is None:
        raise ValueError("This TransformerModel was built with add_decoder=False; call `get_encoder()` instead.")
    if decoder_input_ids is None and decoder_inputs_embeds is None:
        raise ValueError(
            "TransformerModel needs `decoder_input_ids` (or `decoder_inputs_embeds`); "
            "TransformerForConditionalGeneration derives them from `labels` when it is given them. (Trainer "
            "with `label_smoothing_factor` keeps the labels from the model: build the batches with "
            "`DataCollatorForSeq2Seq(tokenizer, model=model)`, which adds `decoder_input_ids`.)"
        )
    if encoder_outputs is None:
        check_token_inputs(input_ids, inputs_embeds, "input_ids", "inputs_embeds")


def check_decoder_inputs(input_ids, inputs_embeds, encoder_hidden_states: torch.Tensor | None) -> None:
    """The target as ids or embeddings, and an encoder output with one row for each target row."""
    check_token_inputs(input_ids, inputs_embeds, "decoder_input_ids", "decoder_inputs_embeds")
    if encoder_hidden_states is None:
        raise ValueError("The decoder needs `encoder_hidden_states` (or `encoder_outputs`).")
    batch_size = (input_ids if input_ids is not None else inputs_embeds).shape[0]
    if batch_size != encoder_hidden_states.shape[0]:
        raise ValueError(
            f"The decoder has {batch_size} rows but the encoder output {encoder_hidden_states.shape[0]}; each "
            "target row reads the encoder output of its own source row (repeat the encoder output for beams)."
        )


def check_decoder_attention_mask(
    mask: torch.Tensor | None, batch_size: int, past_length, length: int, keys: int
) -> None:
    """``decoder_attention_mask``: 2-D over the cached and new target tokens (B, P+T), or a prepared 4-D mask
    (B, 1, T, K). ``past_length`` P is a 0-d tensor with a static cache, which a compiled graph does not read."""
    if mask is None:
        return
    if mask.dim() == 4:
        check_prepared_mask(mask, (batch_size, 1, length, keys))
    elif (
        mask.dim() != 2
        or mask.shape[0] != batch_size
        or (not capturing_graph() and mask.shape[1] != int(past_length) + length)
    ):
        raise ValueError(
            f"`decoder_attention_mask` has shape {tuple(mask.shape)}; expected "
            f"{(batch_size, int(past_length) + length)} (batch, cached + new target tokens), or a "
            f"prepared 4-D mask {(batch_size, 1, length, keys)}."
        )
    else:
        check_mask_values(mask, "decoder_attention_mask")


def check_target_labels(labels: torch.Tensor, shape: tuple[int, ...], vocab_size: int) -> None:
    """Labels (B, T), one for each target token the decoder reads, ids of the output vocabulary or -100."""
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(f"`labels` has shape {tuple(labels.shape)} but the decoder produced {tuple(shape)}.")
    check_labels_in_range(labels, vocab_size)


def classification_problem(labels: torch.Tensor, batch_size: int, num_labels: int, problem_type: str | None) -> str:
    """The classification problem, by transformers' conventions where the config names none: regression for one
    label, single-label for integer labels, else multi-label. Labels of a shape or dtype that problem cannot take
    raise ``ValueError`` naming both (before the model keeps the problem type in its config)."""
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    shape = tuple(labels.shape)
    if problem_type == "single_label_classification":
        if labels.is_floating_point() or shape not in ((batch_size,), (batch_size, 1)):
            raise ValueError(
                f"single-label classification takes one integer class id per row, shape ({batch_size},); got "
                f"{labels.dtype} labels of shape {shape}. Multi-hot targets are float labels of shape "
                f"({batch_size}, {num_labels}) (or set problem_type='multi_label_classification')."
            )
    elif shape not in ((batch_size, num_labels),) + (((batch_size,),) if num_labels == 1 else ()):
        raise ValueError(
            f"{problem_type} takes labels of shape ({batch_size}, {num_labels}) for {num_labels} "
            f"output(s) per row; got shape {shape}."
        )
    return problem_type


def check_one_token_table(stack, config, *, tied_output: bool = False) -> None:
    """A token table the encoder of ``stack`` (a `TransformerModel`) shares, with its decoder (``share_embeddings``)
    or with a tied output projection (``tied_output``), is read as one table. peft's LoRA on it (``target_modules``
    naming ``embed_tokens``) wraps the encoder's reference alone: the adapted model would read two tables, and its
    merged weights compute a third model."""
    table = stack.encoder.embeddings.embed_tokens
    if stack.decoder is not None and config.share_embeddings:
        shared_with, split = "the decoder", table is not stack.decoder.embeddings.embed_tokens
    elif tied_output:
        shared_with, split = "the output projection", False
    else:
        return
    if split or not isinstance(table, torch.nn.Embedding):
        raise ValueError(
            f"the token table is shared by the encoder and {shared_with}, and an adapter on it (peft's target_modules "
            "naming embed_tokens) would adapt one of them alone, and merged, both: leave embed_tokens out of "
            "target_modules"
        )
