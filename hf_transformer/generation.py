"""Generation: what the seq2seq head changes in transformers' ``generate``, and the cache handling it needs.

Every override here replaces or calls a part of ``GenerationMixin`` that transformers does not promise to keep.
Each is listed with the transformers version it was checked against, and ``tests/test_private_hooks.py`` fails,
naming the hook, when an installed transformers no longer has it with the expected signature or no longer calls it
(so an upgrade breaks a test, not a user's decoding).

Checked against transformers 5.23.0 and 5.24.0:

- ``GenerationMixin.generate`` (public), wrapped: the large linear weights are packed for few-row products on CPU
  while it runs (``speed.packed_linear_weights``).
- ``GenerationMixin._valid_auto_compile_criteria(self, model_kwargs, generation_config)`` (private), extended:
  when ``generate`` compiles its decoding step, the weights are not packed (the compiler chooses the products).
- ``GenerationMixin.create_masks_for_generate`` (looked up on the model by ``prepare_inputs_for_generation``),
  overridden: no prepared 4-D mask over a static cache when the target has no padding (the decoder builds the same
  causal mask inside the step).
- ``GenerationMixin._reorder_cache(past_key_values, beam_idx)`` (private; called by ``_beam_search`` when the model
  defines it), overridden: the cross-attention cache is not reordered when the reordering provably changes
  nothing. The cache keeps transformers' shapes and contents either way. ``hf_transformer.ensemble`` overrides it
  once more, to reorder each member's cache this way.
- ``GenerationMixin.prepare_inputs_for_generation(input_ids, next_sequence_length, ..., is_first_iteration)``
  (public, its arguments are not), extended: a decoder input handed over with the cache of an earlier call is cut to
  the tokens that cache does not hold, as transformers cuts it when a ``decoder_attention_mask`` is given.
- ``Cache.get_mask_sizes(query_length, layer_idx)`` (read by :func:`decoding_cache`) and
  ``EncoderDecoderCache.is_updated`` (read by the attention layers).
- The decoding cache's name: transformers 5.24 renames it from ``past_key_values`` to ``cache`` (the argument
  ``generate`` hands the forward, the output classes' field and ``create_masks_for_generate``'s argument; the output
  classes still take the old name as a deprecated alias). The model's own code calls it ``cache`` throughout; this
  module is the one place that meets both names: :func:`accepts_either_cache_name` lets a public forward take either
  (the old name warns where the new one is installed, as transformers' own models do), and :func:`output_with_cache`
  and :func:`cache_of` put the cache into and read it from an output under the installed name (:data:`CACHE_NAME`).
- ``forward.__signature__``: ``generate`` inspects the forward signature of a model defined outside transformers at
  every step; :func:`accepts_either_cache_name` and :func:`precompute_forward_signatures` store it once.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache, GenerationMixin
from transformers.masking_utils import create_masks_for_generate
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .speed import packed_linear_weights, stop_packing

__all__ = [
    "CACHE_NAME",
    "TransformerGenerationMixin",
    "accepts_either_cache_name",
    "as_encoder_output",
    "cache_of",
    "decoding_cache",
    "given_cache",
    "output_with_cache",
    "new_tokens_within_position_table",
    "precompute_forward_signatures",
    "seq2seq_output",
    "TRANSFORMERS_VERSION_CHECKED",
]

TRANSFORMERS_VERSION_CHECKED = "5.23.0 and 5.24.0"

# The name the installed transformers gives the decoding cache: `cache` from 5.24 on, `past_key_values` before.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def given_cache(past_key_values=None, cache=None):
    """The decoding cache a forward was handed, under either name (``generate`` uses :data:`CACHE_NAME`).

    Where the installed transformers calls it ``cache``, the old name still works and warns (``FutureWarning``) as
    transformers' own models do: code written for 5.23 runs, and its author learns of the rename."""
    if past_key_values is not None and cache is not None:
        raise ValueError("The decoding cache was given twice, as `past_key_values` and as `cache`: pass it once.")
    if past_key_values is not None and CACHE_NAME == "cache" and not torch.compiler.is_compiling():
        warnings.warn(
            "`past_key_values` is deprecated for the decoding cache since transformers 5.24 renamed it. "
            "Use `cache` instead.",
            FutureWarning,
            stacklevel=_caller_stacklevel(),
        )
    return past_key_values if past_key_values is not None else cache


def accepts_either_cache_name(forward):
    """Decorates a public forward whose decoding cache is its argument ``cache`` so that it also takes the cache as
    ``past_key_values`` (transformers before 5.24, whose ``generate`` hands it over under that name), through
    :func:`given_cache`. The wrapper's signature lists both names: ``generate`` and ``Trainer`` read a forward's
    parameters, and so does the check for misspelt arguments."""

    @functools.wraps(forward)
    def forward_taking_either_name(self, *args, past_key_values=None, **kwargs):
        if past_key_values is not None:
            kwargs["cache"] = given_cache(past_key_values, kwargs.get("cache"))
        return forward(self, *args, **kwargs)

    signature = inspect.signature(forward)
    parameters = list(signature.parameters.values())
    old_name = inspect.Parameter("past_key_values", inspect.Parameter.KEYWORD_ONLY, default=None)
    last = len(parameters) - (parameters[-1].kind is inspect.Parameter.VAR_KEYWORD)  # before a **kwargs
    forward_taking_either_name.__signature__ = signature.replace(
        parameters=[*parameters[:last], old_name, *parameters[last:]]
    )
    return forward_taking_either_name


def output_with_cache(output_class, cache, **fields):
    """``output_class(**fields)`` holding ``cache`` in the field the installed transformers names it."""
    return output_class(**fields, **{CACHE_NAME: cache})


def seq2seq_output(output_class, decoder_outputs, encoder_outputs, **fields):
    """An encoder-decoder's ``output_class``: ``fields``, and the decoder's and the encoder's outputs under their
    seq2seq names, the decoding cache under the installed one."""
    return output_with_cache(
        output_class,
        cache_of(decoder_outputs),
        **fields,
        decoder_hidden_states=decoder_outputs.hidden_states,
        decoder_attentions=decoder_outputs.attentions,
        cross_attentions=decoder_outputs.cross_attentions,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states,
        encoder_attentions=encoder_outputs.attentions,
    )


def cache_of(output):
    """The decoding cache an output holds (under :data:`CACHE_NAME`), or None."""
    return getattr(output, CACHE_NAME)


def as_encoder_output(encoder_outputs) -> BaseModelOutput:
    """``encoder_outputs`` as the ``BaseModelOutput`` ``generate`` hands over; a tuple (the encoder's output with
    ``return_dict=False``) is read as (last_hidden_state, hidden_states, attentions)."""
    if isinstance(encoder_outputs, BaseModelOutput):
        return encoder_outputs
    return BaseModelOutput(*encoder_outputs[:3])


def decoding_cache(cache: EncoderDecoderCache | None, use_cache: bool, config, length: int):
    """(cache, P, K) for ``length`` new target tokens. The cache is the one given, or with ``use_cache`` and none
    given a new one of growing self- and cross-attention caches, as ``generate`` makes by default (``DynamicCache``
    sizes itself from ``config.decoder_layers``). P: the target tokens it holds (a 0-d tensor with a static cache).
    K: the keys self-attention reads, P + ``length``, or every slot of a static cache, preallocated for the whole
    generation."""
    if use_cache and cache is None:
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    if cache is None:
        return None, 0, length
    return cache, cache.get_seq_length(), cache.get_mask_sizes(length, 0)[0]


# Frames a warning skips to reach the line that called the model: this package's and torch's module calls, and the
# transformers decorators around the forwards (`can_return_tuple`, `capture_outputs`).
_INTERNAL_DIRS = (
    str(Path(__file__).parent),
    str(Path(torch.nn.Module.__call__.__code__.co_filename).parent),
    can_return_tuple.__code__.co_filename,
    capture_outputs.__code__.co_filename,
)


def _caller_stacklevel() -> int:
    """``stacklevel`` for a warning raised in the function that calls this one: the first frame outside
    :data:`_INTERNAL_DIRS`, so that the warning names the user's line, not a forward inside the model."""
    frame, level = inspect.currentframe().f_back.f_back, 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame, level = frame.f_back, level + 1
    return level


class TransformerGenerationMixin(GenerationMixin):
    """``GenerationMixin`` with the package's decoding shortcuts (see the module docstring)."""

    def generate(self, *args, **kwargs):
        """``GenerationMixin.generate``, with the large linear weights packed for few-row products on CPU
        (:func:`hf_transformer.speed.packed_linear_weights`), a requested length the decoder's position table cannot
        hold lowered to what it holds, with a warning, ``num_beams`` below 1 refused by name, and source ids given
        without ``attention_mask`` read as ``forward`` reads them: their padding masked."""
        generation_config = kwargs.get("generation_config") or (args[1] if len(args) > 1 else None)
        generation_config = generation_config or self.generation_config
        num_beams = kwargs.get("num_beams", generation_config.num_beams)
        if num_beams is not None and not (isinstance(num_beams, int) and num_beams >= 1):
            # transformers would fail with a division by zero
            raise ValueError(f"`num_beams` must be an integer of at least 1, got {num_beams!r}")
        self._check_generated_token_ids(generation_config, kwargs)
        kwargs = self._lengths_within_position_table(generation_config, kwargs)
        kwargs = self._source_padding_mask(args, kwargs)
        with packed_linear_weights(self):
            return super().generate(*args, **kwargs)

    def _check_generated_token_ids(self, generation_config, kwargs: dict) -> None:
        # A token the output vocabulary does not hold, forced or as the end of a sequence, would fail inside
        # transformers' logits processors by an index out of range, at the first step.
        vocabulary = getattr(self.config, "decoder_vocab_size", None) or getattr(self.config, "vocab_size", None)
        if not isinstance(vocabulary, int):
            return
        for name in ("forced_bos_token_id", "forced_eos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = kwargs.get(name, getattr(generation_config, name, None))
            for token in value if isinstance(value, (list, tuple)) else [value]:
                if token is not None and not (isinstance(token, int) and 0 <= token < vocabulary):
                    raise ValueError(
                        f"`{name}` {value!r} is not a token of the output vocabulary of {vocabulary} (0 to "
                        f"{vocabulary - 1})"
                    )
        count = kwargs.get("num_return_sequences", getattr(generation_config, "num_return_sequences", None))
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"`num_return_sequences` must be an integer of at least 1, got {count!r}")

    def _source_padding_mask(self, args: tuple, kwargs: dict) -> dict:
        # Without `attention_mask` the forward masks the source's `pad_token_id` tokens. transformers' generate
        # derives no mask for an encoder-decoder model: its encoder call (the forward's own derivation) masks the
        # padding, but every decoding step then gets the encoder output without a mask, and the cross-attention
        # would read the padded positions. The mask the forward derives is passed along instead.
        source = args[0] if args else kwargs.get("inputs", kwargs.get("input_ids"))
        pad_token_id = self.config.pad_token_id
        if (
            kwargs.get("attention_mask") is not None
            or kwargs.get("encoder_outputs") is not None
            or pad_token_id is None
            or not torch.is_tensor(source)
            or source.dtype not in (torch.int32, torch.int64)
        ):
            return kwargs
        return {**kwargs, "attention_mask": source.ne(pad_token_id).long()}

    def _lengths_within_position_table(self, generation_config, kwargs: dict) -> dict:
        # The decoder has a position for each of its `decoder_max_position_embeddings` input tokens; the last token
        # generated is never fed back, so an output may hold one token more. `max_new_tokens` (or `max_length`,
        # which counts the start tokens) past that would stop with an error at the step that overflows, after the
        # work before it: generation is capped there instead, the way the inference API caps it, and told.
        table = getattr(self.config, "decoder_max_position_embeddings", None)
        if not isinstance(table, int):
            return kwargs
        decoder_input_ids = kwargs.get("decoder_input_ids")
        start_length = decoder_input_ids.shape[-1] if torch.is_tensor(decoder_input_ids) else 1
        longest_output = table + 1
        max_new_tokens = kwargs.get("max_new_tokens", generation_config.max_new_tokens)
        if max_new_tokens is not None:
            setting, wanted, allowed = "max_new_tokens", max_new_tokens, longest_output - start_length
        else:
            setting, allowed = "max_length", longest_output
            wanted = kwargs.get("max_length", generation_config.max_length)
        if wanted is None or wanted <= allowed:
            return kwargs
        if allowed < 1 or (setting == "max_length" and start_length >= allowed):
            raise ValueError(
                f"`decoder_input_ids` has {start_length} tokens, which leaves no room in the decoder's position table "
                f"of {table} positions (decoder_max_position_embeddings) for a new token."
            )
        warn_length_capped(setting, wanted, allowed, table)
        return {**kwargs, setting: allowed}

    def _valid_auto_compile_criteria(self, model_kwargs, generation_config) -> bool:
        # Asked once, before the first step. A compiled decoding step leaves its products to the compiler, so
        # packing weights for the one eager step before it would be wasted.
        compiles = super()._valid_auto_compile_criteria(model_kwargs, generation_config)
        if compiles:
            for module in self.modules():
                stop_packing(module)
        return compiles

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, **kwargs):
        # Continuing from the cache of an earlier call (`generate(..., decoder_input_ids=out.sequences,
        # cache=out.cache)`), the decoder input is the whole target so far and the cache holds all of it but the
        # last token. transformers feeds only the uncached tokens when a `decoder_attention_mask` tells it the
        # whole length; without one it feeds every token again, after the cached ones, which caches them twice at
        # later positions and makes the continuation differ from one call. A decoder input longer than the cache
        # is read as the whole target (as transformers reads a decoder-only model's input whose mask is as long).
        cache = kwargs.get(CACHE_NAME)
        if next_sequence_length is None and kwargs.get("is_first_iteration") and cache is not None:
            cached = cache.get_seq_length()
            if 0 < cached < input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - cached
        return super().prepare_inputs_for_generation(input_ids, next_sequence_length=next_sequence_length, **kwargs)

    def create_masks_for_generate(self, config, inputs_embeds, attention_mask, *args, **kwargs):
        # Over a static cache, generate asks for a 4-D self-attention mask before every step. Without target
        # padding the decoder builds the same causal mask over the cache's slots itself, inside the (compiled)
        # step. A 2-D target mask still gets the prepared mask, which keeps one shape across steps. (The cache
        # comes as `past_key_values` or `cache` depending on the transformers release, and goes on as it came.)
        if attention_mask is None:
            return None
        return create_masks_for_generate(config, inputs_embeds, attention_mask, *args, **kwargs)

    def _reorder_cache(self, past_key_values, beam_idx: torch.LongTensor):
        # Beam search reorders both caches after every step. A cross-attention row holds the keys and values of
        # its input's encoder output, repeated for each of its beams, so a reordering that moves every row within
        # its run of equal rows changes nothing there and is skipped; any other reordering is applied.
        if not isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.reorder_cache(beam_idx)
            return past_key_values
        past_key_values.self_attention_cache.reorder_cache(beam_idx)
        for layer in past_key_values.cross_attention_cache.layers:
            if not reordering_keeps_rows(layer, beam_idx):
                layer.reorder_cache(beam_idx)
        return past_key_values


def warn_length_capped(setting: str, wanted: int, allowed: int, table: int) -> None:
    warnings.warn(
        f"`{setting}`={wanted} goes past the decoder's position table of {table} positions "
        f"(decoder_max_position_embeddings): generating with `{setting}`={allowed}, the most it holds.",
        UserWarning,
        stacklevel=_caller_stacklevel(),
    )


def new_tokens_within_position_table(max_new_tokens: int, table: int | None) -> int:
    """``max_new_tokens`` for a decoder that starts from one token, lowered (with a warning) to the ``table``
    positions of its decoder (``decoder_max_position_embeddings``; the last token generated is never read back),
    as ``generate`` lowers it: the inference engines' cap."""
    if isinstance(table, int) and max_new_tokens > table:
        warn_length_capped("max_new_tokens", max_new_tokens, table, table)
        return table
    return max_new_tokens


def reordering_keeps_rows(layer, beam_idx: torch.Tensor) -> bool:
    """Whether ``layer.reorder_cache(beam_idx)`` would leave the layer's keys and values as they are: every row
    is sent to a row of its own run of consecutive equal rows. The runs are found by comparing the rows and kept
    with the tensors they were found in, which are compared again when new or edited since (told by torch's version
    counter). Tensors made under ``torch.inference_mode`` keep no version counter: theirs are compared every time."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not torch.is_tensor(keys) or not torch.is_tensor(values) or keys.shape[0] != beam_idx.shape[0]:
        return False
    versions = None if keys.is_inference() or values.is_inference() else (keys._version, values._version)
    found = getattr(layer, "_equal_row_runs", None)
    if versions is None or found is None or found[0] is not keys or found[1] is not values or found[2] != versions:
        new_run = torch.ones(keys.shape[0], dtype=torch.bool, device=keys.device)  # (R,): a row that starts a run
        new_run[1:] = ~((keys[1:] == keys[:-1]).flatten(1).all(1) & (values[1:] == values[:-1]).flatten(1).all(1))
        found = (keys, values, versions, new_run.cumsum(0))
        layer._equal_row_runs = None if versions is None else found
    runs = found[3]
    return bool(torch.equal(runs[beam_idx.to(runs.device)], runs))


def precompute_forward_signatures(*model_classes) -> None:
    """``generate`` inspects the forward signature of a model defined outside transformers at every decoding step;
    a signature stored on the function makes that lookup much cheaper."""
    for model_class in model_classes:
        model_class.forward.__signature__ = inspect.signature(model_class.forward)
