"""The encoder-decoder Transformer of "Attention Is All You Need", as a HuggingFace model.

Read top to bottom, this file follows the paper:
  5.4  residual dropout ................ ``inverted_dropout``, ``Dropout``
       decoding on CPU ................. ``packed_linear_weights``
  3.5  positional encodings ............ ``sinusoid_table``, ``TransformerEmbeddings``
  3.2  scaled dot-product and multi-head attention ... ``eager_attention_forward``, ``TransformerAttention``
  3.3  position-wise feed-forward ...... ``TransformerFeedForward``
  3.1  encoder and decoder layers ...... ``TransformerEncoderLayer``, ``TransformerDecoderLayer``
       stacks and masks ................ ``TransformerEncoder``, ``TransformerDecoder``
  3.4  shared embeddings, output softmax ``TransformerModel``, ``TransformerForConditionalGeneration``
       (its training loss fused with the output projection: ``_FusedLinearCrossEntropy``)
       classification (seed tutorial) .. ``TransformerForSequenceClassification``

Shapes: B batch, S source length, T target length, P cached target length, D d_model,
H heads, Dh head size, V vocabulary.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, EncoderDecoderCache, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.dynamic_module_utils import custom_object_save
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.masking_utils import create_masks_for_generate
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
    SequenceClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .checkpoint import checked_from_pretrained
from .configuration_transformer import TransformerConfig

# ---------------------------------------------------------------------------------------------------
# 5.4 Residual dropout: the same inverted dropout as torch's, with a cheaper mask on CPU
# ---------------------------------------------------------------------------------------------------

_DROPOUT_MASK_BITS = 15


def inverted_dropout(hidden_states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: zero each element with probability ``p``, scale the rest by 1 / (1 - p).

    On CPU the keep-mask is drawn as 15-bit integers compared with ``p * 2**15`` (``p`` is kept to 3e-5),
    four from each 64-bit draw of the generator: this is about 3x faster than ``F.dropout``'s float
    Bernoulli draw, and autograd keeps a 1-byte mask instead of a 4-byte one. The mask multiplies as bytes,
    as torch's own dropout multiplies by its mask (a dropped inf becomes NaN there too): twice as fast as
    ``torch.where`` forward and backward. Other devices use ``F.dropout``, which is fused there.
    """
    if not training or p == 0.0:
        return hidden_states
    if hidden_states.device.type != "cpu" or p >= 1.0 or torch.compiler.is_compiling():
        return F.dropout(hidden_states, p, training=True)  # compiled: fused with its neighbours instead
    # A 64-bit draw (its top bit is always 0) holds four 16-bit integers: their low 15 bits are the draws.
    count = hidden_states.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=hidden_states.device).random_()
    draws = words.view(torch.int16)[:count].view(hidden_states.shape).bitwise_and_((1 << _DROPOUT_MASK_BITS) - 1)
    keep = draws >= round(p * (1 << _DROPOUT_MASK_BITS))
    return hidden_states * (1.0 / (1.0 - p)) * keep.view(torch.uint8)


class Dropout(nn.Dropout):
    """``nn.Dropout`` computed by :func:`inverted_dropout`."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return inverted_dropout(hidden_states, self.p, self.training)

    @property
    def active(self) -> bool:
        """Whether a call would change anything; callers on the decoding path skip the module call otherwise."""
        return self.training and self.p > 0.0


# ---------------------------------------------------------------------------------------------------
# Linear layers that decode from oneDNN-packed weights on CPU
# ---------------------------------------------------------------------------------------------------

# A decoding step multiplies a few rows (batch x beams) by every weight matrix once. For a large weight,
# oneDNN's pre-packed layout streams it much faster than MKL's sgemm, which repacks the weight at every
# call (at 8 rows, the 8000x256 output projection: 2.4x on an AMD EPYC, 2.1x on an AVX-512 Xeon; 2048x512
# and larger: 1.2-2.1x on the Xeon). Weights of 1 MB (256x1024) gain little or lose (1.3x slower on the
# Xeon) and their packing, about 1-2 ms each, is not repaid in a short generation; many rows are faster
# through MKL.
PACKED_MAX_ROWS = 64
PACKED_MIN_WEIGHT_ELEMENTS = 1 << 20  # 4 MB of fp32


def _packable(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and type(weight) in (torch.Tensor, nn.Parameter)
        and weight.numel() >= PACKED_MIN_WEIGHT_ELEMENTS
        and torch.backends.mkldnn.is_available()
    )


class _PackedLinearForward:
    """The forward of one ``nn.Linear`` inside :func:`packed_linear_weights`: up to ``PACKED_MAX_ROWS`` rows are
    multiplied by a oneDNN-packed copy of the weight (inference only, fp32 on CPU), other products are the
    plain ``F.linear``. Same parameters; the same results up to float rounding (another summation order)."""

    def __init__(self, linear: nn.Linear):
        self.linear = linear
        self.packed_weight: torch.Tensor | None = None

    def __call__(self, hidden_states: torch.Tensor) -> torch.Tensor:
        linear = self.linear
        if (
            hidden_states.numel() <= PACKED_MAX_ROWS * linear.in_features
            and hidden_states.dtype == torch.float32
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()  # a compiled step's matmuls are the compiler's to choose
        ):
            if self.packed_weight is None:  # packed at the first few-row product: the encoder never needs it
                self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
            rows = hidden_states.reshape(-1, linear.in_features).contiguous()
            output = torch.ops.mkldnn._linear_pointwise(rows, self.packed_weight, linear.bias, "none", [], "")
            return output.view(*hidden_states.shape[:-1], linear.out_features)
        return F.linear(hidden_states, linear.weight, linear.bias)


def packed_weight(linear: nn.Module) -> torch.Tensor | None:
    """The packed copy of ``linear``'s weight inside :func:`packed_linear_weights`, once made; else None."""
    forward = linear.__dict__.get("forward")
    return forward.packed_weight if isinstance(forward, _PackedLinearForward) else None


def is_packing(linear: nn.Module) -> bool:
    """Whether ``linear`` multiplies through :class:`_PackedLinearForward` now."""
    return isinstance(linear.__dict__.get("forward"), _PackedLinearForward)


def stop_packing(linear: nn.Module) -> None:
    """Back to the plain product; the packed copy, if any, is dropped."""
    if is_packing(linear):
        del linear.forward


@contextlib.contextmanager
def packed_linear_weights(model: nn.Module):
    """Inside the block, ``model``'s large ``nn.Linear`` weights on CPU are packed when first used for a few-row
    product, and the copies are dropped on exit: a weight changed between two blocks (training,
    ``load_state_dict``, an in-place edit through ``.data``) is always packed anew. Nested blocks share the
    outer copies.

    The layers stay plain ``nn.Linear`` modules (so that ``torch.ao.quantization.quantize_dynamic``, which
    matches the exact type, quantizes them); inside the block each one's ``forward`` is an instance attribute.
    Only exact ``nn.Linear`` modules are taken: a subclass or a quantized layer keeps its own forward."""
    modules = [
        module
        for module in model.modules()
        if type(module) is nn.Linear and not is_packing(module) and _packable(module.weight)
    ]
    for module in modules:
        module.forward = _PackedLinearForward(module)
    try:
        yield
    finally:
        for module in modules:
            stop_packing(module)


# ---------------------------------------------------------------------------------------------------
# 3.5 Positional encoding
# ---------------------------------------------------------------------------------------------------


def sinusoid_table(num_positions: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)); rows 0..num_positions-1.

    Row 0 is the position the seeds give to padding; real tokens are numbered from 1.
    """
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]
    pair_index = torch.arange(dim, dtype=torch.float64) // 2
    angle = position / torch.pow(10000.0, 2 * pair_index / dim)  # (num_positions, dim)
    table = torch.empty_like(angle)
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table.float()


class TransformerEmbeddings(nn.Module):
    """Token embedding (optionally times sqrt(d_model)) + position embedding, then optional LayerNorm and dropout.

    ``"sinusoidal"``: a frozen table with ``max_positions + 1`` rows; tokens are numbered from 1 and
    padding gets row 0. ``"learned"``: a trained table numbered from 0.
    """

    def __init__(self, config: TransformerConfig, embed_tokens: nn.Embedding, max_positions: int):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.max_positions = max_positions
        self.embed_scale = config.embed_scale
        self.position_embedding_type = config.position_embedding_type
        if self.position_embedding_type == "sinusoidal":
            # Not persistent: it is a function of the config, refilled by `_init_weights` after loading.
            self.register_buffer("position_table", sinusoid_table(max_positions + 1, config.d_model), persistent=False)
        else:
            self.position_embeddings = nn.Embedding(max_positions, config.d_model)
        self.layer_norm = (
            nn.LayerNorm(config.d_model, eps=config.embedding_layer_norm_epsilon)
            if config.embedding_layer_norm
            else None
        )
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        token_is_real: torch.Tensor | None,
        past_length: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            _check_ids_in_vocabulary(input_ids, self.embed_tokens.num_embeddings)
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, length = inputs_embeds.shape[:2]
        # `past_length` is a 0-d tensor with a static cache. Compiled, the host cannot read it without breaking the
        # graph: the embedding kernel's own bounds check raises instead.
        if not _capturing_graph() and int(past_length) + length > self.max_positions:
            raise ValueError(
                f"Sequence length {int(past_length) + length} exceeds the position table of {self.max_positions} "
                "positions (max_position_embeddings / decoder_max_position_embeddings); truncate the input."
            )
        positions = torch.arange(length, device=inputs_embeds.device) + past_length
        if self.position_embedding_type == "sinusoidal":
            positions = (positions + 1).expand(batch_size, length)
            if token_is_real is not None:
                positions = positions.masked_fill(~token_is_real, 0)
            position_embeds = F.embedding(positions, self.position_table)
        else:
            position_embeds = self.position_embeddings(positions)[None]
        hidden_states = inputs_embeds * self.embed_scale + position_embeds.to(inputs_embeds.dtype)  # (B, L, D)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return self.dropout(hidden_states) if self.dropout.active else hidden_states


def _capturing_graph() -> bool:
    """True while ``torch.compile`` or ``torch.jit.trace`` (the TorchScript ONNX exporter) records the model.
    Shortcuts that read tensor values on the host are off then: compiled, the read would break the graph; traced,
    the answer for the example input would be baked into the graph (an unpadded example would drop the padding
    mask for every later input)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


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


def _value_range(values: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor: one pass over it, one device sync."""
    low, high = torch.stack(torch.aminmax(values)).tolist()
    return low, high


def _check_ids_in_vocabulary(input_ids: torch.Tensor, vocab_size: int) -> None:
    # A compiled graph cannot read the ids on the host without breaking in two, and a traced one would keep the
    # check's answer for its example; there the embedding kernel's own bounds check raises instead (an
    # index-out-of-bounds error on CPU, a device-side assert on CUDA).
    if input_ids.numel() == 0 or _capturing_graph():
        return
    low, high = _value_range(input_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"Token id {bad} is outside the vocabulary [0, {vocab_size}).")


# ---------------------------------------------------------------------------------------------------
# Masks. Boolean, True = may attend; built once per forward and broadcast over heads.
# ---------------------------------------------------------------------------------------------------


def _padding_mask(
    input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, pad_token_id: int, name: str
) -> torch.Tensor | None:
    """(B, L) bool, True for real tokens: from ``attention_mask`` when given, else ``input_ids != pad``."""
    if attention_mask is not None:
        if input_ids is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"`{name}` has shape {tuple(attention_mask.shape)} but the ids have shape "
                f"{tuple(input_ids.shape)}; they must match."
            )
        if attention_mask.dim() != 2:
            raise ValueError(f"`{name}` must be 2-D (batch, length), got shape {tuple(attention_mask.shape)}.")
        return attention_mask.bool()
    if input_ids is not None:
        return input_ids.ne(pad_token_id)
    return None


def _attend_somewhere(mask: torch.Tensor) -> torch.Tensor:
    """A query row with no visible key (a sequence that is all padding) attends everywhere instead, so
    softmax stays finite; such rows are padding themselves and never read."""
    return mask | ~mask.any(dim=-1, keepdim=True)


def _key_padding_mask(token_is_real: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) -> (B, 1, 1, S); None when nothing is padding, so that attention runs without a mask."""
    if token_is_real is None or _all_real(token_is_real):
        return None
    return _attend_somewhere(token_is_real[:, None, None, :])


def _all_real(token_is_real: torch.Tensor) -> bool:
    # Reading the answer waits for the device; a compiled or traced graph, which cannot branch on data, keeps the
    # mask.
    return not _capturing_graph() and bool(token_is_real.all())


def _causal_mask(
    query_length: int,
    past_length: int | torch.Tensor,
    key_length: int,
    key_is_real: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor | None:
    """(T, K), or (B, 1, T, K) with key padding: query t (absolute position P+t) sees the keys at positions <= P+t.

    The attention reads K keys: the P cached and T new ones (K = P+T), or every slot of a static cache, whose
    slots beyond P+T are not written yet and so are hidden like future tokens. ``past_length`` is a 0-d tensor
    with a static cache. None for one new token over the unpadded keys of a growing cache (a decoding step): it
    sees every key."""
    if key_is_real is not None and _all_real(key_is_real):
        key_is_real = None
    if (
        query_length == 1
        and key_is_real is None
        and not torch.is_tensor(past_length)
        and key_length == past_length + 1
        and not torch.jit.is_tracing()  # a traced graph may be run with other lengths
    ):
        return None
    query_positions = torch.arange(query_length, device=device) + past_length
    key_positions = torch.arange(key_length, device=device)
    mask = key_positions[None, :] <= query_positions[:, None]
    if key_is_real is not None:
        mask = _attend_somewhere(mask[None, None] & key_is_real[:, None, None, :])
    return mask


def _check_prepared_mask(mask: torch.Tensor, expected: tuple[int, int, int, int]) -> None:
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


# ---------------------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V per head, materialising the probabilities.

    query (B, H, T, Dh), key/value (B, H, S, Dh) -> output (B, T, H, Dh), probabilities (B, H, T, S).
    """
    scores = torch.matmul(query * scaling, key.transpose(-1, -2))  # (B, H, T, S)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill_(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = inverted_dropout(probs, dropout, module.training)
    output = torch.matmul(probs, value).transpose(1, 2).contiguous()  # (B, T, H, Dh)
    return output, probs


# Compiled on CPU, the plain product-softmax-product path is fused by inductor (scaling, mask and softmax in one
# kernel) and beats sdpa's flash kernel, whose per-call cost dominates over few keys: a compiled greedy decoding
# step over a static cache was 4-5% faster at base-small (64 source keys, 33 cache slots) and 7% slower with all
# attention on that path at 256 source keys.
COMPILED_CPU_MATH_ATTENTION_MAX_KEYS = 128


def _compiled_short_cpu_attention(key: torch.Tensor) -> bool:
    return (
        key.device.type == "cpu"
        and key.shape[-2] <= COMPILED_CPU_MATH_ATTENTION_MAX_KEYS
        and torch.compiler.is_compiling()
    )


class TransformerAttention(nn.Module):
    """Multi-head attention: H heads of size Dh (``H * Dh`` may differ from D), concatenated and projected."""

    def __init__(self, config: TransformerConfig, is_causal: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        inner_dim = self.num_heads * self.head_dim
        self.q_proj = nn.Linear(config.d_model, inner_dim)
        self.k_proj = nn.Linear(config.d_model, inner_dim)
        self.v_proj = nn.Linear(config.d_model, inner_dim)
        self.out_proj = nn.Linear(inner_dim, config.d_model)

    def _cpu_dropout(self, query: torch.Tensor) -> bool:
        return self.training and self.dropout > 0.0 and query.device.type == "cpu"

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        """(B, L, H*Dh) -> (B, H, L, Dh)."""
        return states.view(*states.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states))

        cache = None
        if past_key_values is not None:
            cache = (
                past_key_values.cross_attention_cache if is_cross_attention else past_key_values.self_attention_cache
            )
        if is_cross_attention and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys and values are computed once.
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            key = self._split_heads(self.k_proj(source))
            value = self._split_heads(self.v_proj(source))
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

        dropout = self.dropout if self.training else 0.0
        implementation = "eager"
        # On CPU, sdpa has no fused kernel with dropout: it falls back to the same math plus a "safe" softmax
        # and a float Bernoulli mask. The eager path with `inverted_dropout` measured 3-9% faster steps there.
        if not output_attentions and not self._cpu_dropout(query) and not _compiled_short_cpu_attention(key):
            implementation = self.config._attn_implementation
        if implementation == "sdpa":
            # torch's kernel called directly (the generic wrapper's checks cost 2% of a decoding step). A single
            # query, a decoding step, sees every cached key: causal only for several queries without a mask.
            is_causal = self.is_causal and attention_mask is None and query.shape[2] > 1
            output = F.scaled_dot_product_attention(
                query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=is_causal, scale=self.scaling
            ).transpose(1, 2)  # (B, T, H, Dh)
            probs = None
        else:
            attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
            output, probs = attention_interface(
                self,
                query,
                key,
                value,
                attention_mask,
                dropout=dropout,
                scaling=self.scaling,
                is_causal=self.is_causal and attention_mask is None,
            )
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1))  # (B, T, D)
        return output, probs


# ---------------------------------------------------------------------------------------------------
# 3.3 Position-wise feed-forward
# ---------------------------------------------------------------------------------------------------


class TransformerFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, the same at every position (the seeds' kernel-size-1 convolutions)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.d_model)
        self.activation = nn.ReLU() if config.activation_function == "relu" else nn.GELU()
        self.activation_dropout = Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation(self.fc1(hidden_states))
        if self.activation_dropout.active:
            hidden_states = self.activation_dropout(hidden_states)
        return self.fc2(hidden_states)


# ---------------------------------------------------------------------------------------------------
# 3.1 Encoder and decoder layers: each sub-layer is wrapped in dropout, a residual connection and
# LayerNorm, either after the sum ("post", the paper) or on the sub-layer's input ("pre").
# ---------------------------------------------------------------------------------------------------


class _SublayerConnection(nn.Module):
    """The LayerNorm and dropout around one sub-layer. Not called as a module: a layer asks it for the
    sub-layer's input and then adds the sub-layer's output back (two plain calls per sub-layer, which keeps
    a decoding step's Python short)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.layer_norm_position == "pre"

    def sublayer_input(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """pre: LayerNorm(x); post: x."""
        return self.layer_norm(hidden_states) if self.pre_norm else hidden_states

    def add(self, hidden_states: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        """pre: x + Dropout(Sublayer(LN(x))); post: LayerNorm(x + Dropout(Sublayer(x)))."""
        if self.dropout.active:
            sublayer_output = self.dropout(sublayer_output)
        hidden_states = hidden_states + sublayer_output
        return hidden_states if self.pre_norm else self.layer_norm(hidden_states)


class TransformerEncoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = TransformerAttention(config)
        self.self_attn_sublayer = _SublayerConnection(config)
        self.feed_forward = TransformerFeedForward(config)
        self.feed_forward_sublayer = _SublayerConnection(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        output, self_attn_probs = self.self_attn(
            self.self_attn_sublayer.sublayer_input(hidden_states),
            attention_mask=attention_mask,
            output_attentions=output_attentions,
        )
        hidden_states = self.self_attn_sublayer.add(hidden_states, output)
        output = self.feed_forward(self.feed_forward_sublayer.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_sublayer.add(hidden_states, output)
        return hidden_states, self_attn_probs


class TransformerDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: TransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = TransformerAttention(config, is_causal=True, layer_idx=layer_idx)
        self.self_attn_sublayer = _SublayerConnection(config)
        self.cross_attn = TransformerAttention(config, layer_idx=layer_idx)
        self.cross_attn_sublayer = _SublayerConnection(config)
        self.feed_forward = TransformerFeedForward(config)
        self.feed_forward_sublayer = _SublayerConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        self_attention_mask: torch.Tensor | None = None,
        cross_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        output, self_attn_probs = self.self_attn(
            self.self_attn_sublayer.sublayer_input(hidden_states),
            attention_mask=self_attention_mask,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        hidden_states = self.self_attn_sublayer.add(hidden_states, output)
        output, cross_attn_probs = self.cross_attn(
            self.cross_attn_sublayer.sublayer_input(hidden_states),
            key_value_states=encoder_hidden_states,
            attention_mask=cross_attention_mask,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        hidden_states = self.cross_attn_sublayer.add(hidden_states, output)
        output = self.feed_forward(self.feed_forward_sublayer.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_sublayer.add(hidden_states, output)
        return hidden_states, self_attn_probs, cross_attn_probs


# ---------------------------------------------------------------------------------------------------
# Base class: weight initialisation, tying, HF capabilities
# ---------------------------------------------------------------------------------------------------


class TransformerPreTrainedModel(PreTrainedModel):
    config_class = TransformerConfig
    config: TransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _no_split_modules = ["TransformerEncoderLayer", "TransformerDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, nn.Embedding):
            # Token and learned position tables are drawn with std d_model^-0.5: scaled by sqrt(d_model) they
            # are of unit size like the sinusoids, and as the tied output projection they give logits of unit
            # size. (With the generic 0.02 the frozen sinusoids drown the tokens and a model barely sees its
            # input.) This is done per nn.Embedding because transformers skips, for models defined outside
            # the library, any module that holds no parameter or buffer of its own.
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, TransformerEmbeddings) and module.position_embedding_type == "sinusoidal":
            init.copy_(module.position_table, sinusoid_table(*module.position_table.shape))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        # transformers only logs weights that are missing from, or unused in, a checkpoint; a model loaded
        # here must never be left with random weights, so those reports become errors (see checkpoint.py).
        return checked_from_pretrained(
            super().from_pretrained, cls, pretrained_model_name_or_path, *model_args, **kwargs
        )

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        # Tying here follows the config: `share_embeddings` ties the encoder and decoder tables even when
        # `tie_word_embeddings` is off (the base class would drop every tie then).
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys or {})

    def mark_tied_weights_as_initialized(self, loading_info) -> None:
        # transformers flags every tied target as initialised, so that it is not drawn before being tied. With
        # `share_embeddings` the decoder's token table is the encoder's very module, so the flag lands on the source
        # as well, and a source the weights lack (`from_pretrained(None, config=..., state_dict={})`) would stay on
        # the meta device, neither initialised nor reported missing. Such a source is unflagged and reported.
        unloaded = {source for source in self.all_tied_weights_keys.values() if source in loading_info.missing_keys}
        super().mark_tied_weights_as_initialized(loading_info)
        for source in unloaded:
            self.get_parameter(source)._is_hf_initialized = False
            loading_info.missing_keys.add(source)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # `register_for_auto_class` maps only the class being saved in `auto_map`; naming every head lets each Auto
        # class load the folder through the copied code (trust_remote_code) where this package is not installed.
        if not self.is_remote_code():
            return super().save_pretrained(save_directory, *args, **kwargs)
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **remote_code_auto_map()}
        package_class = self._package_class()
        if type(self) is package_class:
            return super().save_pretrained(save_directory, *args, **kwargs)
        # A wrapper made the instance's class (FSDP 2's `fully_shard` swaps it for a subclass defined in torch):
        # transformers would name that class in `auto_map` and copy torch's file beside the weights. The copy is
        # made here from the package's class instead; the `auto_map` above already names its heads.
        self.is_remote_code = lambda: False  # shadows the classmethod for this one call
        try:
            result = super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            del self.is_remote_code
        is_main_process = args[0] if args else kwargs.get("is_main_process", True)
        if self.should_save_on_this_rank(is_main_process):
            custom_object_save(object.__new__(package_class), save_directory)
        return result

    @classmethod
    def _package_class(cls) -> type:
        """The first class of the package in `cls`'s hierarchy (`cls` itself unless a wrapper subclassed it)."""
        return next(klass for klass in cls.__mro__ if klass.__module__ == TransformerPreTrainedModel.__module__)

    @property
    def dummy_inputs(self) -> dict[str, torch.Tensor]:
        pad = self.config.pad_token_id
        real = [i for i in range(min(self.config.vocab_size, 12)) if i != pad]
        input_ids = torch.tensor([real[:5], real[5:8] + [pad, pad]], device=self.device)
        return {"input_ids": input_ids, "attention_mask": input_ids.ne(pad)}


def _tied_embedding_keys(config: TransformerConfig, prefix: str = "", lm_head: bool = False) -> dict[str, str]:
    """{target: source}: the decoder's token table is the encoder's with `share_embeddings`, and the output
    projection (``lm_head``) is the decoder's table with `tie_word_embeddings`."""
    encoder_table = f"{prefix}encoder.embeddings.embed_tokens.weight"
    decoder_table = f"{prefix}decoder.embeddings.embed_tokens.weight"
    keys = {decoder_table: encoder_table} if config.share_embeddings else {}
    if lm_head and config.tie_word_embeddings:
        keys["lm_head.weight"] = keys.get(decoder_table, decoder_table)
    return keys


# ---------------------------------------------------------------------------------------------------
# Stacks
# ---------------------------------------------------------------------------------------------------


class TransformerEncoder(nn.Module):
    """N encoder layers over the embedded source. Called by ``generate`` through ``get_encoder()``."""

    main_input_name = "input_ids"

    def __init__(self, config: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config
        self.embeddings = TransformerEmbeddings(config, embed_tokens, config.max_position_embeddings)
        self.layers = nn.ModuleList([TransformerEncoderLayer(config) for _ in range(config.encoder_layers)])
        self.layer_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon) if config.final_layer_norm else None
        )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        check_token_inputs(input_ids, inputs_embeds, "input_ids", "inputs_embeds")
        output_attentions = _default(output_attentions, self.config.output_attentions)
        output_hidden_states = _default(output_hidden_states, self.config.output_hidden_states)
        return_dict = _default(return_dict, self.config.return_dict)

        token_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id, "attention_mask")
        if inputs_embeds is not None and token_is_real is not None and token_is_real.shape != inputs_embeds.shape[:2]:
            raise ValueError(
                f"`attention_mask` has shape {tuple(token_is_real.shape)} but `inputs_embeds` has "
                f"(batch, length) {tuple(inputs_embeds.shape[:2])}; they must match."
            )
        hidden_states = self.embeddings(input_ids, inputs_embeds, token_is_real)  # (B, S, D)
        mask = _key_padding_mask(token_is_real)  # (B, 1, 1, S)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, probs = layer(hidden_states, attention_mask=mask, output_attentions=output_attentions)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (probs,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
            if output_hidden_states:
                all_hidden_states = all_hidden_states[:-1] + (hidden_states,)
        output = BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )
        return output if return_dict else output.to_tuple()


class TransformerDecoder(nn.Module):
    """N decoder layers: masked self-attention over the target, then attention over the encoder output."""

    def __init__(self, config: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config
        self.embeddings = TransformerEmbeddings(config, embed_tokens, config.decoder_max_position_embeddings)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        )
        self.layer_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon) if config.final_layer_norm else None
        )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """``attention_mask`` covers past and current target tokens (B, P+T), or is a prepared 4-D mask (B, 1, T, K)
        over the K keys self-attention reads (``generate`` builds one for a static cache); ``encoder_attention_mask``
        is the source padding (B, S) or None."""
        check_token_inputs(input_ids, inputs_embeds, "decoder_input_ids", "decoder_inputs_embeds")
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (or `encoder_outputs`).")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        # P: the cached target tokens (a 0-d tensor with a static cache); K: the keys self-attention reads, P + T,
        # or every slot of a static cache, preallocated for the whole generation.
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        batch_size, length = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
        key_length = past_key_values.get_mask_sizes(length, 0)[0] if past_key_values is not None else length
        if batch_size != encoder_hidden_states.shape[0]:
            raise ValueError(
                f"The decoder has {batch_size} rows but the encoder output {encoder_hidden_states.shape[0]}; each "
                "target row reads the encoder output of its own source row (repeat the encoder output for beams)."
            )

        # Target padding is taken from `decoder_attention_mask` when given. Otherwise only the position
        # numbering looks at the pad id: the causal mask already hides right padding from every real
        # token, and it does so identically with and without the cache.
        token_is_real = None
        if attention_mask is not None and attention_mask.dim() == 4:
            # Prepared by the caller (generate does so for a static cache): used as given.
            _check_prepared_mask(attention_mask, (batch_size, 1, length, key_length))
            self_mask = attention_mask
        else:
            key_is_real = None
            if attention_mask is not None:
                if (
                    attention_mask.dim() != 2
                    or attention_mask.shape[0] != batch_size
                    or (not _capturing_graph() and attention_mask.shape[1] != int(past_length) + length)
                ):
                    raise ValueError(
                        f"`decoder_attention_mask` has shape {tuple(attention_mask.shape)}; expected "
                        f"{(batch_size, int(past_length) + length)} (batch, cached + new target tokens), or a "
                        f"prepared 4-D mask {(batch_size, 1, length, key_length)}."
                    )
                key_is_real = attention_mask.bool()
                token_is_real = key_is_real[:, key_is_real.shape[1] - length :]
                if key_is_real.shape[1] < key_length:  # a static cache's unwritten slots: hidden as future tokens
                    key_is_real = F.pad(key_is_real, (0, key_length - key_is_real.shape[1]), value=True)
            device = (input_ids if input_ids is not None else inputs_embeds).device
            self_mask = _causal_mask(length, past_length, key_length, key_is_real, device)  # (T, K) | (B, 1, T, K)
        if token_is_real is None and input_ids is not None:
            token_is_real = input_ids.ne(self.config.pad_token_id)

        hidden_states = self.embeddings(input_ids, inputs_embeds, token_is_real, past_length)  # (B, T, D)
        cross_mask = _key_padding_mask(encoder_attention_mask)  # (B, 1, 1, S)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self_attentions = () if output_attentions else None
        all_cross_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, self_probs, cross_probs = layer(
                hidden_states,
                encoder_hidden_states,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                past_key_values=past_key_values,
                output_attentions=output_attentions,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_self_attentions += (self_probs,)
                all_cross_attentions += (cross_probs,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
            if output_hidden_states:
                all_hidden_states = all_hidden_states[:-1] + (hidden_states,)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values if use_cache else None,
            hidden_states=all_hidden_states,
            attentions=all_self_attentions,
            cross_attentions=all_cross_attentions,
        )


def _default(value, fallback):
    return fallback if value is None else value


# ---------------------------------------------------------------------------------------------------
# 3.4 The model: encoder + decoder with shared token tables
# ---------------------------------------------------------------------------------------------------


class TransformerModel(TransformerPreTrainedModel):
    """Encoder and decoder without a head; returns ``Seq2SeqModelOutput``.

    ``add_decoder=False`` builds the encoder alone (used by classifiers that pool the encoder).
    """

    def __init__(self, config: TransformerConfig, add_decoder: bool = True):
        super().__init__(config)
        encoder_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = TransformerEncoder(config, encoder_tokens)
        self.decoder = None
        if add_decoder:
            decoder_tokens = (
                encoder_tokens
                if config.share_embeddings
                else nn.Embedding(config.decoder_vocab_size, config.d_model, padding_idx=config.pad_token_id)
            )
            self.decoder = TransformerDecoder(config, decoder_tokens)
            self._tied_weights_keys = _tied_embedding_keys(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embeddings.embed_tokens = value
        if self.decoder is not None and self.config.share_embeddings:
            self.decoder.embeddings.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> TransformerEncoder:
        return self.encoder

    def get_decoder(self) -> TransformerDecoder | None:
        return self.decoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput | tuple:
        output_attentions = _default(output_attentions, self.config.output_attentions)
        output_hidden_states = _default(output_hidden_states, self.config.output_hidden_states)
        return_dict = _default(return_dict, self.config.return_dict)
        use_cache = _default(use_cache, self.config.use_cache)
        if self.decoder is None:
            raise ValueError("This TransformerModel was built with add_decoder=False; call `get_encoder()` instead.")
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "TransformerModel needs `decoder_input_ids` (or `decoder_inputs_embeds`); "
                "TransformerForConditionalGeneration derives them from `labels`."
            )

        if encoder_outputs is None:
            check_token_inputs(input_ids, inputs_embeds, "input_ids", "inputs_embeds")
        # The source padding, computed once: the encoder and the cross-attention both use it.
        source_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id, "attention_mask")
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=source_is_real,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        if source_is_real is not None and source_is_real.shape != encoder_outputs[0].shape[:2]:
            raise ValueError(
                f"`attention_mask` has shape {tuple(source_is_real.shape)} but the encoder output covers "
                f"{tuple(encoder_outputs[0].shape[:2])} (batch, source length)."
            )

        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs[0],
            encoder_attention_mask=source_is_real,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


def _reordering_keeps_rows(layer, beam_idx: torch.Tensor) -> bool:
    """Whether ``layer.reorder_cache(beam_idx)`` would leave the layer's keys and values as they are: every row
    is sent to a row of its own run of consecutive equal rows. The runs are found once, by comparing the rows, and
    kept with the tensors they were found in; new or edited tensors are compared again."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not torch.is_tensor(keys) or not torch.is_tensor(values) or keys.shape[0] != beam_idx.shape[0]:
        return False
    found = getattr(layer, "_equal_row_runs", None)
    if found is None or found[0] is not keys or found[1] is not values or found[2] != (keys._version, values._version):
        new_run = torch.ones(keys.shape[0], dtype=torch.bool, device=keys.device)  # (R,): a row that starts a run
        new_run[1:] = ~((keys[1:] == keys[:-1]).flatten(1).all(1) & (values[1:] == values[:-1]).flatten(1).all(1))
        found = (keys, values, (keys._version, values._version), new_run.cumsum(0))
        layer._equal_row_runs = found
    runs = found[3]
    return bool(torch.equal(runs[beam_idx.to(runs.device)], runs))


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads [start, y1, ..., y_{n-1}] to predict [y1, ..., yn]; -100 becomes pad."""
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


_LOGITS_PER_CHUNK = 1 << 21  # about 8 MB of float32 logits per chunk: they stay in cache while used


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T (+ bias)``, computed a chunk of rows at a time.

    Each chunk's logits become, in place, the gradient of its loss (softmax - (1 - s) onehot - s / V) and are
    multiplied back at once, so the gradients exist when the forward returns and the (N, V) logits never
    do; the backward only scales them by the incoming gradient.
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, smoothing: float, bias=None):
        # hidden (N, D), weight (V, D), labels (N,) in [0, V) or -100, bias (V,) or None
        #   -> loss summed over the labelled rows, ()
        vocab_size = weight.shape[0]
        chunk = max(1, _LOGITS_PER_CHUNK // vocab_size)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_bias = bias is not None and ctx.needs_input_grad[4]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            rows = hidden[start : start + chunk]
            row_labels = labels[start : start + chunk]
            logits = (rows @ weight.t() if bias is None else torch.addmm(bias, rows, weight.t())).float()  # (c, V)
            labelled = row_labels != -100
            targets = row_labels.clamp(min=0)[:, None]
            target_logits = logits.gather(1, targets).squeeze(1)
            mean_logits = logits.mean(dim=-1) if smoothing else None
            # In place, one pass each: shift by the row maximum, exponentiate, normalise.
            row_max = logits.amax(dim=-1, keepdim=True)
            exp_logits = logits.sub_(row_max).exp_()
            row_sum = exp_logits.sum(dim=-1, keepdim=True)
            log_normalizer = (row_sum.log() + row_max).squeeze(1)  # logsumexp, (c,)
            loss = log_normalizer - target_logits
            if smoothing:
                loss = (1.0 - smoothing) * loss + smoothing * (log_normalizer - mean_logits)
            total += loss.masked_fill(~labelled, 0.0).sum()
            if not (want_hidden or want_weight or want_bias):
                continue
            grad_logits = exp_logits.div_(row_sum)  # softmax
            if smoothing:
                grad_logits.sub_(smoothing / vocab_size)
            grad_logits.scatter_add_(1, targets, grad_logits.new_full(targets.shape, smoothing - 1.0))
            unlabelled = (~labelled).nonzero().squeeze(1)
            if unlabelled.numel():
                grad_logits.index_fill_(0, unlabelled, 0.0)
            grad_logits = grad_logits.to(hidden.dtype)
            if want_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[start : start + chunk])
            if want_weight:
                grad_weight.addmm_(grad_logits.t(), rows)
            if want_bias:
                grad_bias += grad_logits.sum(dim=0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return (
            grad_hidden * grad_total if grad_hidden is not None else None,
            grad_weight * grad_total if grad_weight is not None else None,
            None,
            None,
            grad_bias * grad_total if grad_bias is not None else None,
        )


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float = 0.0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, labels, reduction="sum")`` (-100 ignored) without ever
    holding the (N, V) logits; hidden (N, D), weight (V, D), labels (N,), bias (V,) -> ()."""
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels, float(label_smoothing), bias)


class TransformerForConditionalGeneration(TransformerPreTrainedModel, GenerationMixin):
    """Encoder-decoder with the output projection to the target vocabulary (tied to the decoder's token
    table when ``tie_word_embeddings``), a label-smoothed cross-entropy loss, and ``generate()``."""

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.model = TransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=False)
        self._tied_weights_keys = _tied_embedding_keys(config, prefix="model.", lm_head=True)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def get_encoder(self, modality: str | None = None) -> TransformerEncoder:
        return self.model.encoder

    def get_decoder(self) -> TransformerDecoder:
        return self.model.decoder

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        if not self.config.share_embeddings:
            raise ValueError(
                "resize_token_embeddings resizes the one shared vocabulary; this model has separate encoder "
                "and decoder vocabularies (share_embeddings=False)."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.decoder_vocab_size = self.config.vocab_size
        return embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def generate(self, *args, **kwargs):
        """``GenerationMixin.generate``, with the large linear weights packed for few-row products on CPU
        (:func:`packed_linear_weights`)."""
        with packed_linear_weights(self):
            return super().generate(*args, **kwargs)

    def _valid_auto_compile_criteria(self, model_kwargs, generation_config) -> bool:
        # generate asks this once, before the first step. A compiled decoding step leaves its products to the
        # compiler, so packing weights for the one eager step before it would be wasted (2.5 ms per call for an
        # 8000x256 output projection on CPU).
        compiles = super()._valid_auto_compile_criteria(model_kwargs, generation_config)
        if compiles:
            for module in self.modules():
                stop_packing(module)
        return compiles

    def create_masks_for_generate(self, config, inputs_embeds, attention_mask, past_key_values, **kwargs):
        # Over a static cache, generate asks for a 4-D self-attention mask before every step. Without target
        # padding the decoder builds the same causal mask over the cache's slots itself, inside the (compiled)
        # step: 4-5% faster greedy and beam decoding over a static cache. A 2-D target mask still gets the
        # prepared mask, which keeps one shape across steps while the 2-D mask grows.
        if attention_mask is None:
            return None
        return create_masks_for_generate(
            config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
            past_key_values=past_key_values, **kwargs,
        )  # fmt: skip

    def _reorder_cache(self, past_key_values, beam_idx: torch.LongTensor):
        # Beam search reorders both caches after every step. A cross-attention row holds the keys and values of
        # its input's encoder output, repeated for each of its beams, so a reordering that moves every row within
        # its run of equal rows changes nothing there and is skipped; any other reordering is applied. The cache
        # has transformers' shapes and contents either way.
        if not isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.reorder_cache(beam_idx)
            return past_key_values
        past_key_values.self_attention_cache.reorder_cache(beam_idx)
        for layer in past_key_values.cross_attention_cache.layers:
            if not _reordering_keeps_rows(layer, beam_idx):
                layer.reorder_cache(beam_idx)
        return past_key_values

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        """``labels`` (B, T), -100 ignored, are shifted right into ``decoder_input_ids`` when those are absent.
        ``num_items_in_batch`` (given by Trainer) makes the loss a sum over the whole accumulated batch
        divided by its number of target tokens, so gradient accumulation gives the same update."""
        return_dict = _default(return_dict, self.config.return_dict)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, D)
        logits = loss = None
        if labels is not None:
            if labels.shape != hidden_states.shape[:2]:
                raise ValueError(
                    f"`labels` has shape {tuple(labels.shape)} but the decoder produced "
                    f"{tuple(hidden_states.shape[:2])}."
                )
            if self._fuses_output_loss(hidden_states):
                loss = self.fused_loss(hidden_states, labels, num_items_in_batch)
        if loss is None:
            logits = self.lm_head(hidden_states)  # (B, T, V)
            if labels is not None:
                loss = self.loss(logits, labels, num_items_in_batch)

        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return output if return_dict else output.to_tuple()

    def _fuses_output_loss(self, hidden_states: torch.Tensor) -> bool:
        # The fused loss reads `lm_head.weight` without calling `lm_head`: not under ZeRO-3, which gathers a
        # partitioned weight only around its module's call, and not under autocast, whose casts it would skip.
        return (
            self.config.fused_output_loss
            and self.training
            and torch.is_grad_enabled()
            and not torch.is_autocast_enabled(hidden_states.device.type)
            and isinstance(self.lm_head, nn.Linear)  # a quantized output layer has no float weight to read
            and hidden_states.dtype == self.lm_head.weight.dtype
            and self.lm_head.bias is None
            and not is_deepspeed_zero3_enabled()
            and not torch.compiler.is_compiling()  # its chunk loop and label checks would break the graph
        )

    def fused_loss(
        self, hidden_states: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """``self.loss(self.lm_head(hidden_states), labels, ...)`` without the logits (``fused_output_loss``)."""
        flat_labels = labels.reshape(-1).to(hidden_states.device)
        vocab_size = self.lm_head.weight.shape[0]
        labelled = flat_labels[flat_labels != -100]
        low, high = _value_range(labelled) if labelled.numel() else (0, 0)
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"`labels` must be in [0, {vocab_size}) or -100 (ignored), got values from {low} to {high}."
            )
        total = fused_linear_cross_entropy(
            hidden_states.reshape(-1, hidden_states.shape[-1]),
            self.lm_head.weight,
            flat_labels,
            self.config.label_smoothing,
        )
        if num_items_in_batch is None:
            return total / labelled.numel()
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(total.device)
        return total / num_items_in_batch

    def loss(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token-level cross-entropy with the config's label smoothing; -100 labels are ignored."""
        flat_logits = logits.reshape(-1, logits.shape[-1]).float()
        flat_labels = labels.reshape(-1).to(logits.device)
        if num_items_in_batch is None:
            return F.cross_entropy(
                flat_logits, flat_labels, ignore_index=-100, label_smoothing=self.config.label_smoothing
            )
        total = F.cross_entropy(
            flat_logits, flat_labels, ignore_index=-100, label_smoothing=self.config.label_smoothing, reduction="sum"
        )
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(total.device)
        return total / num_items_in_batch


# ---------------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------------


@dataclass
class EncoderSequenceClassifierOutput(SequenceClassifierOutput):
    r"""Output of [`TransformerForSequenceClassification`] when it pools the encoder (``classifier_pooling`` "mean",
    "max" or "first"), with the fields of an encoder classifier's output:

    loss: (), with ``labels``. logits: (B, num_labels). hidden_states: with ``output_hidden_states``, the
    embeddings and each encoder layer's output, (B, S, D) each (the last one after the final LayerNorm, if any).
    attentions: with ``output_attentions``, each encoder layer's attention probabilities, (B, H, S, S).
    last_hidden_state: (B, S, D), the encoder output that was pooled; always given (``Trainer`` leaves it out of
    its predictions through ``config.keys_to_ignore_at_inference``).
    """

    last_hidden_state: torch.FloatTensor | None = None

    # The config says encoder-decoder, so generic code reads the encoder's fields under their seq2seq names:
    # the same tensors, not extra fields (``to_tuple()`` and Trainer do not see them twice).
    @property
    def encoder_last_hidden_state(self) -> torch.FloatTensor | None:
        return self.last_hidden_state

    @property
    def encoder_hidden_states(self) -> tuple[torch.FloatTensor, ...] | None:
        return self.hidden_states

    @property
    def encoder_attentions(self) -> tuple[torch.FloatTensor, ...] | None:
        return self.attentions


class TransformerForSequenceClassification(TransformerPreTrainedModel):
    """A linear classifier over a pooled representation (``config.classifier_pooling``):
    "mean" / "max" over the encoder's non-pad tokens, "first" encoder token, or "decoder": the decoder
    reads one start token over the encoder output, as in the seed tutorial's sentiment model.

    Encoder pooling returns [`EncoderSequenceClassifierOutput`] (``hidden_states``, ``attentions`` and
    ``last_hidden_state`` of the encoder). The decoder read-out returns ``Seq2SeqSequenceClassifierOutput``: the
    decoder's and the encoder's states and attentions under their seq2seq names, ``encoder_last_hidden_state``
    always.
    """

    # The loss is a mean over the model's own batch; Trainer must not pass `num_items_in_batch` and must
    # divide by the accumulation steps itself (it would otherwise scale the loss by the world size).
    accepts_loss_kwargs = False

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = TransformerModel(config, add_decoder=config.classifier_pooling == "decoder")
        self.dropout = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_encoder(self, modality: str | None = None) -> TransformerEncoder:
        return self.model.encoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> EncoderSequenceClassifierOutput | Seq2SeqSequenceClassifierOutput | tuple:
        output_attentions = _default(output_attentions, self.config.output_attentions)
        output_hidden_states = _default(output_hidden_states, self.config.output_hidden_states)
        return_dict = _default(return_dict, self.config.return_dict)
        encoder_outputs = self.model.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        encoder_states = encoder_outputs.last_hidden_state  # (B, S, D)
        token_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id, "attention_mask")
        if token_is_real is None:
            token_is_real = torch.ones(encoder_states.shape[:2], dtype=torch.bool, device=encoder_states.device)

        decoder_outputs = None
        pooling = self.config.classifier_pooling
        if pooling == "mean":
            weights = token_is_real.unsqueeze(-1).to(encoder_states.dtype)
            pooled = (encoder_states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        elif pooling == "max":
            hidden = encoder_states.masked_fill(~token_is_real.unsqueeze(-1), torch.finfo(encoder_states.dtype).min)
            pooled = hidden.max(dim=1).values
            pooled = pooled.masked_fill(~token_is_real.any(1, keepdim=True), 0.0)  # all-padding rows
        elif pooling == "first":
            pooled = encoder_states[:, 0]
        else:
            start = torch.full(
                (encoder_states.shape[0], 1), self.config.decoder_start_token_id, device=encoder_states.device
            )
            decoder_outputs = self.model.decoder(
                input_ids=start,
                encoder_hidden_states=encoder_states,
                encoder_attention_mask=token_is_real,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
            pooled = decoder_outputs.last_hidden_state.max(dim=1).values  # (B, D)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)

        loss = self._classification_loss(logits, labels) if labels is not None else None
        if decoder_outputs is None:
            output = EncoderSequenceClassifierOutput(
                loss=loss,
                logits=logits,
                hidden_states=encoder_outputs.hidden_states,
                attentions=encoder_outputs.attentions,
                last_hidden_state=encoder_states,
            )
        else:
            output = Seq2SeqSequenceClassifierOutput(
                loss=loss,
                logits=logits,
                decoder_hidden_states=decoder_outputs.hidden_states,
                decoder_attentions=decoder_outputs.attentions,
                cross_attentions=decoder_outputs.cross_attentions,
                encoder_last_hidden_state=encoder_states,
                encoder_hidden_states=encoder_outputs.hidden_states,
                encoder_attentions=encoder_outputs.attentions,
            )
        return output if return_dict else output.to_tuple()

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """HF's conventions: regression for one label, single-label for integer labels, else multi-label."""
        labels = labels.to(logits.device)
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.squeeze(-1).float())
        if self.config.problem_type == "single_label_classification":
            flat = labels.reshape(-1)
            valid = flat[flat != -100]
            low, high = _value_range(valid) if valid.numel() else (0, 0)
            if low < 0 or high >= self.num_labels:
                raise ValueError(f"Label values must be in [0, {self.num_labels}), got {valid.tolist()[:10]}.")
            return F.cross_entropy(logits.float().reshape(-1, self.num_labels), flat)
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


# `generate` inspects the forward signature of a model defined outside transformers at every decoding step;
# a precomputed signature makes that lookup about 6x cheaper.
for _model_class in (TransformerModel, TransformerForConditionalGeneration, TransformerForSequenceClassification):
    _model_class.forward.__signature__ = inspect.signature(_model_class.forward)


def remote_code_auto_map() -> dict[str, str]:
    """``auto_map`` of a saved folder: Auto class -> ``module.Class`` in the configuration and modeling files that
    ``save_pretrained`` copies beside the weights."""
    module = __name__.rsplit(".", 1)[-1]
    config_module = TransformerConfig.__module__.rsplit(".", 1)[-1]
    return {
        "AutoConfig": f"{config_module}.{TransformerConfig.__name__}",
        "AutoModel": f"{module}.{TransformerModel.__name__}",
        "AutoModelForSeq2SeqLM": f"{module}.{TransformerForConditionalGeneration.__name__}",
        "AutoModelForSequenceClassification": f"{module}.{TransformerForSequenceClassification.__name__}",
    }


__all__ = [
    "TransformerPreTrainedModel",
    "TransformerModel",
    "TransformerForConditionalGeneration",
    "TransformerForSequenceClassification",
    "EncoderSequenceClassifierOutput",
    "TransformerEncoder",
    "TransformerDecoder",
    "sinusoid_table",
    "shift_tokens_right",
]
