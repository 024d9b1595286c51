# Copyright 2026 The hf_transformer Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The encoder-decoder Transformer of "Attention Is All You Need", as a HuggingFace model.

Read top to bottom, this file follows the paper:
  3.5  positional encoding and embeddings ...... ``sinusoid_table``, ``TransformerEmbeddings``
       masks (padding, causal) ................. ``_padding_mask``, ``_key_padding_mask``, ``_causal_mask``
  3.2  scaled dot-product attention ............ ``scaled_dot_product_attention``
       multi-head attention .................... ``TransformerAttention``
  3.3  position-wise feed-forward .............. ``TransformerFeedForward``
  5.4  sub-layer connection (dropout, residual, LayerNorm after the sum or before the sub-layer)
                                                 ``_SublayerConnection``
  3.1  encoder and decoder layers ............. ``TransformerEncoderLayer``, ``TransformerDecoderLayer``
       the pretrained-model base (initialisation, tying, loading, saving) ``TransformerPreTrainedModel``
  3.1  encoder and decoder stacks ............. ``TransformerEncoder``, ``TransformerDecoder``
  3.4  the model and its heads ................. ``TransformerModel``, ``TransformerForConditionalGeneration``
       (shared embeddings, output softmax), ``TransformerForSequenceClassification`` (the seed tutorial's task),
       ``TransformerForMaskedLM`` (masked-token pretraining of the classifier's encoder)

Where a faster kernel may take over from a paper component, the component makes one call into ``speed.py``
(dropout, ``attend``, ``output_logits_and_loss``); ``generation.py`` holds what the seq2seq head changes in
transformers' ``generate``, and the decoding cache's name: ``cache`` here, and whatever the installed transformers
calls it at the public forwards and in the outputs; ``input_checks.py`` the errors for wrong inputs.

Written as transformers writes its own models: the stacks declare what transformers may record of them
(``_can_record_outputs``: hidden states, attention probabilities) and ``capture_outputs`` collects it,
``can_return_tuple`` answers ``return_dict=False``, ``auto_docstring`` documents the classes and forwards; the
output flags reach the attention through ``**kwargs`` (``TransformersKwargs``). transformers' model linter
(``transformers-mlinter``, run by tests/test_model_linter.py) reports two exceptions, each explained where it
is: the config's field ``d_model`` (the paper's name) and the masked-token head's ``nn.Sequential`` (its saved
weights' names).

Shapes: B batch, S source length, T target length, P cached target length, K keys read, D d_model,
H heads, Dh head size, V vocabulary.
"""

from dataclasses import dataclass
from typing import Unpack

import torch
import torch.nn.functional as F
from torch import nn
from transformers import EncoderDecoderCache, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    MaskedLMOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
    SequenceClassifierOutput,
)
from transformers.utils import TransformersKwargs, auto_docstring, can_return_tuple, logging
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .checkpoint import CheckedLoadingMixin
from .configuration_transformer import TransformerConfig
from .generation import (
    TransformerGenerationMixin,
    accepts_either_cache_name,
    as_encoder_output,
    decoding_cache,
    output_with_cache,
    seq2seq_output,
)
from .input_checks import (
    check_decoder_attention_mask,
    check_decoder_inputs,
    check_ids_in_vocabulary,
    check_labels_in_range,
    check_no_misspelt_arguments,
    check_one_token_table,
    check_padding_mask,
    check_seq2seq_inputs,
    check_sequence_fits,
    check_target_labels,
    check_token_inputs,
    classification_problem,
)
from .speed import (
    AttentionKernels,
    Dropout,
    all_true,
    attend,
    inverted_dropout,
    output_logits_and_loss,
    pack_token_characters,
    sees_every_key,
)

logger = logging.get_logger(__name__)

# ---------------------------------------------------------------------------------------------------
# 3.5 Positional encoding and embeddings
# ---------------------------------------------------------------------------------------------------


def sinusoid_table(num_positions: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)); rows 0..num_positions-1.

    Row 0 is the position the seeds give to padding; real tokens are numbered from 1."""
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

    ``numbers_real_tokens`` (the encoder): each row's real tokens are numbered 1, 2, ... wherever its padding
    sits, so a left-padded source reads as it does right-padded or alone. The decoder numbers by place, as its
    cache does, one step at a time.
    """

    def __init__(
        self,
        config: TransformerConfig,
        embed_tokens: nn.Embedding,
        max_positions: int,
        numbers_real_tokens: bool = False,
    ):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.max_positions = max_positions
        self.numbers_real_tokens = numbers_real_tokens
        self.embed_scale = config.embed_scale
        self.position_embedding_type = config.position_embedding_type
        # CODEPATH: sinusoidal for the seed tutorial's checkpoints (convert.from_seed), the paper's configurations and
        # the recipes' models; learned for the book-style encoder's (convert.from_book) and the saved folder
        # seq2seq-pre-ln-learned.
        if self.position_embedding_type == "sinusoidal":
            # Not persistent: it is a function of the config, refilled by `_init_weights` after loading.
            self.position_table = nn.Buffer(sinusoid_table(max_positions + 1, config.d_model), persistent=False)
        else:
            self.position_embeddings = nn.Embedding(max_positions, config.d_model)
        self.layer_norm = (
            # CODEPATH: the book-style encoder's checkpoints (convert.from_book) normalise the embedding sum; the seed
            # tutorial's, the paper's configurations and the recipes' models do not.
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
        vocabulary, width = self.embed_tokens.weight.shape  # (a LoRA layer on the table has no num_embeddings)
        if inputs_embeds is None:
            check_ids_in_vocabulary(input_ids, vocabulary)
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.shape[-1] != width:
            raise ValueError(
                f"the embeddings given have {inputs_embeds.shape[-1]} features; this model's tokens have {width} "
                "(d_model)"
            )
        batch_size, length = inputs_embeds.shape[:2]
        check_sequence_fits(past_length + length, self.max_positions)
        if self.numbers_real_tokens and token_is_real is not None:
            # (B, L): 1, 2, ...; padding 0. Summed as integers: ONNX's CumSum takes no booleans (legacy export).
            positions = token_is_real.long().cumsum(-1).masked_fill(~token_is_real, 0)
            if self.position_embedding_type == "sinusoidal":
                position_embeds = F.embedding(positions, self.position_table)
            else:
                position_embeds = self.position_embeddings((positions - 1).clamp(min=0))
        else:
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
        return self.dropout(hidden_states)


# ---------------------------------------------------------------------------------------------------
# Masks. Boolean, True = may attend; built once per forward and broadcast over heads.
# ---------------------------------------------------------------------------------------------------


def _padding_mask(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    pad_token_id: int,
    inputs_embeds: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """(B, L) bool, True for real tokens: from ``attention_mask`` when given, else ``input_ids != pad``."""
    if attention_mask is not None:
        tokens, tokens_name = (input_ids, "the ids") if input_ids is not None else (inputs_embeds, "`inputs_embeds`")
        check_padding_mask(attention_mask, "attention_mask", tokens, tokens_name)
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
    if token_is_real is None or all_true(token_is_real):
        return None
    return _attend_somewhere(token_is_real[:, None, None, :])


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
    if key_is_real is not None and all_true(key_is_real):
        key_is_real = None
    if key_is_real is None and sees_every_key(query_length, past_length, key_length):
        return None
    query_positions = torch.arange(query_length, device=device) + past_length
    key_positions = torch.arange(key_length, device=device)
    mask = key_positions[None, :] <= query_positions[:, None]
    if key_is_real is not None:
        mask = _attend_somewhere(mask[None, None] & key_is_real[:, None, None, :])
    return mask


def _recording_flags(kwargs: dict, config: TransformerConfig) -> dict:
    """Of the keywords a forward was given beside its own arguments, the flags that ask for what the stacks record
    (``output_hidden_states``; ``output_attentions``, the config's when not given: read by ``capture_outputs``, and
    by each attention, which then keeps its probabilities). The other keywords transformers and its tools pass to
    every model (``position_ids``, ``decoder_*`` inputs of a classifier that reads no decoder input...) go no further
    than the forward given them."""
    output_attentions = kwargs.get("output_attentions")
    flags = {"output_attentions": config.output_attentions if output_attentions is None else output_attentions}
    if "output_hidden_states" in kwargs:
        flags["output_hidden_states"] = kwargs["output_hidden_states"]
    return flags


# ---------------------------------------------------------------------------------------------------
# 3.2 Attention: scaled dot-product, then multi-head
# ---------------------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V per head (eq. 1), materialising the probabilities.

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


def _projection(in_features: int, out_features: int, xavier_gain: float = 1.0) -> nn.Linear:
    """A sub-layer's linear projection. ``xavier_gain``: its Glorot-uniform gain when the config's
    ``init_method`` is "xavier_uniform" (read by ``TransformerPreTrainedModel._init_weights``)."""
    projection = nn.Linear(in_features, out_features)
    projection.xavier_gain = xavier_gain
    return projection


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
        self.q_proj = _projection(config.d_model, inner_dim, xavier_gain=2**-0.5)
        self.k_proj = _projection(config.d_model, inner_dim, xavier_gain=2**-0.5)
        self.v_proj = _projection(config.d_model, inner_dim, xavier_gain=2**-0.5)
        self.out_proj = _projection(inner_dim, config.d_model)

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        """(B, L, H*Dh) -> (B, H, L, Dh)."""
        return states.view(*states.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> output (B, T, D), and the attention probabilities (B, H, T, K) where they are recorded
        (``output_attentions``, given or the config's; ``_can_record_outputs`` of the stacks), else None."""
        is_cross_attention = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states))

        # The decoding cache holds the keys and values of the target tokens decoded before, and of the encoder output.
        own_cache = None
        if cache is not None:
            own_cache = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache
        if is_cross_attention and own_cache is not None and cache.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys and values are computed once.
            key, value = own_cache.layers[self.layer_idx].keys, own_cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            key = self._split_heads(self.k_proj(source))
            value = self._split_heads(self.v_proj(source))
            if own_cache is not None:
                key, value = own_cache.update(key, value, self.layer_idx)  # (B, H, K, Dh): cached, then new
                if is_cross_attention:
                    cache.is_updated[self.layer_idx] = True

        # softmax(Q K^T / sqrt(d_k)) V: scaled_dot_product_attention above, or a faster kernel (speed.attend).
        output_attentions = kwargs.get("output_attentions")
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output, probs = attend(self, query, key, value, attention_mask, output_attentions, scaled_dot_product_attention)
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1))  # (B, T, D)
        return output, probs


# ---------------------------------------------------------------------------------------------------
# 3.3 Position-wise feed-forward
# ---------------------------------------------------------------------------------------------------


class TransformerFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, the same at every position (the seeds' kernel-size-1 convolutions)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.fc1 = _projection(config.d_model, config.intermediate_size)
        self.fc2 = _projection(config.intermediate_size, config.d_model)
        # CODEPATH: ReLU in the paper's configurations and the translators `train_translation.py` builds; GELU
        # (exact, erf) in the seed tutorial's and the book-style encoder's checkpoints and the saved folders.
        self.activation = nn.ReLU() if config.activation_function == "relu" else nn.GELU()
        self.activation_dropout = Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_dropout(self.activation(self.fc1(hidden_states)))  # (B, L, d_ff)
        return self.fc2(hidden_states)


# ---------------------------------------------------------------------------------------------------
# 3.1 Encoder and decoder layers. Each sub-layer is wrapped in dropout, a residual connection and
# LayerNorm (5.4), after the sum ("post", the paper) or on the sub-layer's input ("pre").
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
        hidden_states = hidden_states + self.dropout(sublayer_output)
        return hidden_states if self.pre_norm else self.layer_norm(hidden_states)


class TransformerEncoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = TransformerAttention(config)
        self.self_attn_sublayer = _SublayerConnection(config)
        self.feed_forward = TransformerFeedForward(config)
        self.feed_forward_sublayer = _SublayerConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        output, _ = self.self_attn(
            self.self_attn_sublayer.sublayer_input(hidden_states), attention_mask=attention_mask, **kwargs
        )
        hidden_states = self.self_attn_sublayer.add(hidden_states, output)
        output = self.feed_forward(self.feed_forward_sublayer.sublayer_input(hidden_states))
        return self.feed_forward_sublayer.add(hidden_states, output)


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
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        output, _ = self.self_attn(
            self.self_attn_sublayer.sublayer_input(hidden_states),
            attention_mask=self_attention_mask,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.self_attn_sublayer.add(hidden_states, output)
        output, _ = self.cross_attn(
            self.cross_attn_sublayer.sublayer_input(hidden_states),
            key_value_states=encoder_hidden_states,
            attention_mask=cross_attention_mask,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.cross_attn_sublayer.add(hidden_states, output)
        output = self.feed_forward(self.feed_forward_sublayer.sublayer_input(hidden_states))
        return self.feed_forward_sublayer.add(hidden_states, output)


# ---------------------------------------------------------------------------------------------------
# The pretrained-model base: initialisation, tied tables, loading and saving
# ---------------------------------------------------------------------------------------------------


@auto_docstring(
    custom_intro="""
    Initialisation and capabilities here; loading and saving checks in `checkpoint.CheckedLoadingMixin`, the attention
    kernels transformers may choose in `speed.AttentionKernels`.
    """
)
class TransformerPreTrainedModel(CheckedLoadingMixin, AttentionKernels, PreTrainedModel):
    @classmethod
    def remote_code_auto_map(cls) -> dict[str, str]:
        """``auto_map`` of a saved folder: Auto class -> ``module.Class`` in the configuration and modeling files that
        ``save_pretrained`` copies beside the weights."""
        module = __name__.rsplit(".", 1)[-1]
        config_module = TransformerConfig.__module__.rsplit(".", 1)[-1]
        return {
            "AutoConfig": f"{config_module}.{TransformerConfig.__name__}",
            "AutoModel": f"{module}.{TransformerModel.__name__}",
            "AutoModelForSeq2SeqLM": f"{module}.{TransformerForConditionalGeneration.__name__}",
            "AutoModelForSequenceClassification": f"{module}.{TransformerForSequenceClassification.__name__}",
            "AutoModelForMaskedLM": f"{module}.{TransformerForMaskedLM.__name__}",
        }

    config_class = TransformerConfig
    config: TransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["TransformerEncoderLayer", "TransformerDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]

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
        # CODEPATH: only a new model's first draw (`--init_method xavier_uniform` of the training scripts; the
        # default, N(0, init_std), elsewhere); loaded weights are never drawn.
        elif hasattr(module, "xavier_gain") and self.config.init_method == "xavier_uniform":
            init.xavier_uniform_(module.weight, gain=module.xavier_gain)  # the layers' projections; biases stay zero
        elif isinstance(module, TransformerEmbeddings) and module.position_embedding_type == "sinusoidal":
            init.copy_(module.position_table, sinusoid_table(*module.position_table.shape))
        elif isinstance(module, TransformerForMaskedLM):
            init.zeros_(module.output_bias)
        elif isinstance(module, NgramClassifier):
            # A new n-gram score is zero (the encoder's logits alone) until it is fitted.
            init.zeros_(module.weight)
            init.zeros_(module.bias)
            init.zeros_(module.idf)
            if module.reads_characters:
                init.zeros_(module.token_characters)
            if module.reads_tokens:
                init.copy_(module.canonical_ids, torch.arange(module.canonical_ids.shape[0]))

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
    # CODEPATH: as `TransformerModel.__init__`'s shared table.
    keys = {decoder_table: encoder_table} if config.share_embeddings else {}
    if lm_head and config.tie_word_embeddings:
        keys["lm_head.weight"] = keys.get(decoder_table, decoder_table)
    return keys


# ---------------------------------------------------------------------------------------------------
# 3.1 Encoder and decoder stacks. Their outputs beside the last hidden state are recorded by transformers
# (``capture_outputs``, from the modules named in ``_can_record_outputs``): the embeddings and each layer's output
# (``hidden_states``, the last one after the final LayerNorm, if any) and each attention's probabilities.
# ---------------------------------------------------------------------------------------------------


class _Stack:
    """What the encoder and the decoder have in common as parts of a model.

    As BART's encoder and decoder: code handed only `model.get_encoder()` or `get_decoder()` reaches that stack's own
    token table (`self.embeddings.embed_tokens`). Their weights are drawn by the model that holds them, with its other
    weights and in its order (``init_weights`` draws nothing here): the order in which a seed has drawn them since
    before the stacks were models of their own."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.embed_tokens = value

    def init_weights(self) -> None:
        pass


class TransformerEncoder(_Stack, TransformerPreTrainedModel):
    """N encoder layers over the embedded source. Called by ``generate`` through ``get_encoder()``."""

    _can_record_outputs = {"hidden_states": TransformerEncoderLayer, "attentions": TransformerAttention}
    _fsdp_plan = {"layers.*": "free_full_weight"}  # FSDP2 through transformers: one unit per layer (TransformerConfig)

    def __init__(self, config: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(
            config, embed_tokens, config.max_position_embeddings, numbers_real_tokens=True
        )
        self.layers = nn.ModuleList(TransformerEncoderLayer(config) for _ in range(config.encoder_layers))
        self.layer_norm = (
            # CODEPATH: pre-LN models (the saved folders masked-lm and seq2seq-pre-ln-learned) end each stack with a
            # LayerNorm; post-LN ones (the seed tutorial's, the paper's, the recipes') and the book-style encoder
            # do not.
            nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon) if config.final_layer_norm else None
        )
        self.post_init()

    @capture_outputs
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        check_no_misspelt_arguments(TransformerEncoder.forward, kwargs)
        check_token_inputs(input_ids, inputs_embeds, "input_ids", "inputs_embeds")
        token_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id, inputs_embeds)
        hidden_states = self.embeddings(input_ids, inputs_embeds, token_is_real)  # (B, S, D)
        mask = _key_padding_mask(token_is_real)  # (B, 1, 1, S)
        flags = _recording_flags(kwargs, self.config)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, **flags)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class TransformerDecoder(_Stack, TransformerPreTrainedModel):
    """N decoder layers: masked self-attention over the target, then attention over the encoder output."""

    _can_record_outputs = {
        "hidden_states": TransformerDecoderLayer,
        "attentions": OutputRecorder(TransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(TransformerAttention, index=1, layer_name="cross_attn"),
    }
    _fsdp_plan = {"layers.*": "free_full_weight"}

    def __init__(self, config: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(config, embed_tokens, config.decoder_max_position_embeddings)
        self.layers = nn.ModuleList(TransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers))
        self.layer_norm = (
            # CODEPATH: as the encoder's.
            nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon) if config.final_layer_norm else None
        )
        self.post_init()

    @accepts_either_cache_name
    @capture_outputs
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        r"""
        attention_mask (`torch.Tensor` of shape `(batch_size, past_length + target_length)`, *optional*):
            Which target tokens, the cached ones and the new ones, are real (1) or padding (0); or a prepared 4-D
            mask `(batch_size, 1, target_length, key_length)` over the keys self-attention reads (`generate` builds
            one for a static cache).
        cache (`EncoderDecoderCache`, *optional*):
            The keys and values of the target tokens decoded before, and of the encoder output. With `use_cache`
            and no cache, a new one is made and returned.
        past_key_values (`EncoderDecoderCache`, *optional*):
            `cache` under the name transformers gave it before 5.24.
        """
        check_no_misspelt_arguments(TransformerDecoder.forward, kwargs)
        flags = _recording_flags(kwargs, self.config)
        cache, past_length, token_is_real, self_mask = self._cache_and_self_attention_mask(
            input_ids, inputs_embeds, attention_mask, encoder_hidden_states, cache, use_cache
        )
        hidden_states = self.embeddings(input_ids, inputs_embeds, token_is_real, past_length)  # (B, T, D)
        if encoder_attention_mask is not None:
            # (The ONNX decoder step passes a cross-attention key (B, H, S, Dh) as the states, for its batch size.)
            states = encoder_hidden_states if encoder_hidden_states.dim() == 3 else None
            check_padding_mask(encoder_attention_mask, "encoder_attention_mask", states, "`encoder_hidden_states`")
            encoder_attention_mask = encoder_attention_mask.bool()  # a 0/1 mask of ints or floats too
        cross_mask = _key_padding_mask(encoder_attention_mask)  # (B, 1, 1, S)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                encoder_hidden_states,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                cache=cache,
                **flags,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return output_with_cache(
            BaseModelOutputWithPastAndCrossAttentions, cache if use_cache else None, last_hidden_state=hidden_states
        )

    def _cache_and_self_attention_mask(
        self,
        input_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor | None,
        cache: EncoderDecoderCache | None,
        use_cache: bool,
    ) -> tuple[EncoderDecoderCache | None, int | torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """What the layers need besides the target: the cache (a new one with ``use_cache`` and none given), the
        number P of target tokens it holds, which target tokens are real (B, T; for their positions), and the
        self-attention mask, (T, K) or (B, 1, T, K), or None where every key may be read."""
        check_decoder_inputs(input_ids, inputs_embeds, encoder_hidden_states)
        target = input_ids if input_ids is not None else inputs_embeds
        batch_size, length = target.shape[:2]
        cache, past_length, key_length = decoding_cache(cache, use_cache, self.config, length)
        check_decoder_attention_mask(attention_mask, batch_size, past_length, length, key_length)

        # Target padding is taken from `decoder_attention_mask` when given. Otherwise only the position
        # numbering looks at the pad id: the causal mask already hides right padding from every real
        # token, and it does so identically with and without the cache.
        token_is_real = None if input_ids is None else input_ids.ne(self.config.pad_token_id)
        if attention_mask is not None and attention_mask.dim() == 4:  # prepared by the caller (generate, static cache)
            if attention_mask.dtype == torch.bool:  # a row that sees no key attends as the model's own masks make it
                attention_mask = _attend_somewhere(attention_mask)
            return cache, past_length, token_is_real, attention_mask
        key_is_real = None
        if attention_mask is not None:
            key_is_real = attention_mask.bool()  # (B, P+T)
            token_is_real = key_is_real[:, key_is_real.shape[1] - length :]
            if key_is_real.shape[1] < key_length:  # a static cache's unwritten slots: hidden as future tokens
                key_is_real = F.pad(key_is_real, (0, key_length - key_is_real.shape[1]), value=True)
        self_mask = _causal_mask(length, past_length, key_length, key_is_real, target.device)  # (T, K) | (B, 1, T, K)
        return cache, past_length, token_is_real, self_mask


# ---------------------------------------------------------------------------------------------------
# 3.4 The model: encoder + decoder with shared token tables, and its heads
# ---------------------------------------------------------------------------------------------------


@auto_docstring(
    custom_intro="""
    Encoder and decoder without a head; returns `Seq2SeqModelOutput`. `add_decoder=False` builds the encoder alone
    (used by the classifiers that pool the encoder, and by the masked-token head).
    """
)
class TransformerModel(TransformerPreTrainedModel):
    def __init__(self, config: TransformerConfig, add_decoder: bool = True):
        r"""
        add_decoder (`bool`, *optional*, defaults to `True`):
            Whether to build the decoder; without it the model is the encoder alone.
        """
        super().__init__(config)
        encoder_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = TransformerEncoder(config, encoder_tokens)
        self.decoder = None
        if add_decoder:
            decoder_tokens = (
                # CODEPATH: one table for both stacks in the recipes' models, the paper's configurations and the
                # saved folder seq2seq; two in the seed tutorial's checkpoints (`enc_emb`, `dec_emb`), beside the
                # book-style encoder's and in the saved folder seq2seq-pre-ln-learned.
                encoder_tokens
                if config.share_embeddings
                else nn.Embedding(config.decoder_vocab_size, config.d_model, padding_idx=config.pad_token_id)
            )
            self.decoder = TransformerDecoder(config, decoder_tokens)
            self._tied_weights_keys = _tied_embedding_keys(config)
        self.post_init()

    # transformers finds `encoder` and `decoder` by name (get_encoder, get_decoder) and the heads' tables through
    # `self.model` (base_model_prefix): these two say where the table sits.
    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embeddings.embed_tokens = value
        # CODEPATH: as in `__init__`: the decoder reads the same table only where the model shares one.
        if self.decoder is not None and self.config.share_embeddings:
            self.decoder.embeddings.embed_tokens = value

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        if self.decoder is not None and not self.config.share_embeddings:
            raise ValueError(
                "resize_token_embeddings resizes the one shared vocabulary; this model has separate encoder "
                "and decoder vocabularies (share_embeddings=False)."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.decoder_vocab_size = self.config.vocab_size  # one vocabulary (the config checks it)
        return embeddings

    @accepts_either_cache_name
    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        r"""
        decoder_attention_mask (`torch.Tensor` of shape `(batch_size, past_length + target_length)`, *optional*):
            Which target tokens are real (1) or padding (0), the cached ones included; or a prepared 4-D mask over the
            keys self-attention reads. Without it the causal mask alone hides right padding from every real token.
        cache (`EncoderDecoderCache`, *optional*):
            The keys and values of the target tokens decoded before, and of the encoder output.
        past_key_values (`EncoderDecoderCache`, *optional*):
            `cache` under the name transformers gave it before 5.24.
        """
        check_no_misspelt_arguments(TransformerModel.forward, kwargs)
        check_one_token_table(self, self.config)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        check_seq2seq_inputs(
            self.decoder, input_ids, inputs_embeds, encoder_outputs, decoder_input_ids, decoder_inputs_embeds
        )
        # The source padding, computed once: the encoder and the cross-attention both use it.
        source_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=source_is_real,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **_recording_flags(kwargs, self.config),
            )
        encoder_outputs = as_encoder_output(encoder_outputs)  # one given as a tuple (return_dict=False) too
        if source_is_real is not None:
            check_padding_mask(source_is_real, "attention_mask", encoder_outputs[0], "the encoder output")

        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs[0],
            encoder_attention_mask=source_is_real,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **_recording_flags(kwargs, self.config),
        )
        return seq2seq_output(
            Seq2SeqModelOutput, decoder_outputs, encoder_outputs, last_hidden_state=decoder_outputs.last_hidden_state
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads [start, y1, ..., y_{n-1}] to predict [y1, ..., yn]; -100 becomes pad."""
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


@auto_docstring(
    custom_intro="""
    Encoder-decoder with the output projection to the target vocabulary (tied to the decoder's token table when
    `tie_word_embeddings`), a label-smoothed cross-entropy loss, and `generate()`.
    """
)
class TransformerForConditionalGeneration(TransformerPreTrainedModel, TransformerGenerationMixin):
    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.model = TransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=False)
        self._tied_weights_keys = _tied_embedding_keys(config, prefix="model.", lm_head=True)
        self.post_init()

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

    @accepts_either_cache_name
    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        decoder_attention_mask (`torch.Tensor` of shape `(batch_size, past_length + target_length)`, *optional*):
            Which target tokens are real (1) or padding (0), the cached ones included.
        cache (`EncoderDecoderCache`, *optional*):
            The keys and values of the target tokens decoded before, and of the encoder output.
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            The target tokens, -100 where ignored; shifted right into `decoder_input_ids` when those are absent.
        num_items_in_batch (`int` or `torch.Tensor`, *optional*):
            Given by `Trainer`: the loss is then a sum over the whole accumulated batch divided by its number of
            target tokens, so that gradient accumulation gives the same update.
        past_key_values (`EncoderDecoderCache`, *optional*):
            `cache` under the name transformers gave it before 5.24.
        """
        check_no_misspelt_arguments(TransformerForConditionalGeneration.forward, kwargs)
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
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **_recording_flags(kwargs, self.config),
        )
        hidden_states = outputs.last_hidden_state  # (B, T, D)
        if labels is not None:
            check_target_labels(labels, hidden_states.shape[:2], self.config.decoder_vocab_size)
        logits, loss = self.logits_and_loss(hidden_states, labels, num_items_in_batch)

        # The decoder's and the encoder's outputs pass on under the names they came with, the cache's among them.
        decoder_and_encoder = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **decoder_and_encoder)

    def logits_and_loss(
        self,
        hidden_states: torch.Tensor,
        labels: torch.Tensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """logits = hidden_states W_emb^T (B, T, V), and with ``labels`` their label-smoothed loss (:meth:`loss`).
        In a training step (``config.fused_output_loss``) the loss is computed without holding the logits, which are
        then None (``speed.output_logits_and_loss``)."""
        return output_logits_and_loss(
            self.lm_head,
            hidden_states,
            labels,
            self.loss,
            label_smoothing=self.config.label_smoothing,
            fuse=self.config.fused_output_loss,
            training=self.training,
            num_items_in_batch=num_items_in_batch,
        )

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
# Classification (the seed tutorial's task)
# ---------------------------------------------------------------------------------------------------


@auto_docstring(
    custom_intro="""
    Output of [`TransformerForSequenceClassification`] when it pools the encoder (`classifier_pooling` "mean", "max"
    or "first"), with the fields of an encoder classifier's output. The config says encoder-decoder, so generic code
    reads the encoder's fields under their seq2seq names too (`encoder_last_hidden_state`, `encoder_hidden_states`,
    `encoder_attentions`): the same tensors, not extra fields (`to_tuple()` and Trainer do not see them twice).
    """
)
@dataclass
class EncoderSequenceClassifierOutput(SequenceClassifierOutput):
    r"""
    loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` is provided):
        The classification (or regression) loss.
    hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`):
        The embeddings and each encoder layer's output, `(batch_size, source_length, d_model)` each (the last one
        after the final LayerNorm, if any).
    attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        Each encoder layer's attention probabilities, `(batch_size, num_heads, source_length, source_length)`.
    last_hidden_state (`torch.FloatTensor` of shape `(batch_size, source_length, d_model)`):
        The encoder output that was pooled; always given (`Trainer` leaves it out of its predictions through
        `config.keys_to_ignore_at_inference`).
    """

    last_hidden_state: torch.FloatTensor | None = None

    @property
    def encoder_last_hidden_state(self) -> torch.FloatTensor | None:
        return self.last_hidden_state

    @property
    def encoder_hidden_states(self) -> tuple[torch.FloatTensor, ...] | None:
        return self.hidden_states

    @property
    def encoder_attentions(self) -> tuple[torch.FloatTensor, ...] | None:
        return self.attentions


def mean_pooling(states: torch.Tensor, token_is_real: torch.Tensor) -> torch.Tensor:
    """(B, S, D), (B, S) -> (B, D): the mean over each row's real tokens (0 for a row of padding only)."""
    weights = token_is_real.unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def max_pooling(states: torch.Tensor, token_is_real: torch.Tensor) -> torch.Tensor:
    """(B, S, D), (B, S) -> (B, D): the maximum over each row's real tokens (0 for a row of padding only)."""
    pooled = states.masked_fill(~token_is_real.unsqueeze(-1), torch.finfo(states.dtype).min).max(dim=1).values
    return pooled.masked_fill(~token_is_real.any(1, keepdim=True), 0.0)


def first_token_pooling(states: torch.Tensor, token_is_real: torch.Tensor) -> torch.Tensor:
    """(B, S, D), (B, S) -> (B, D): each row's first real token (past a left-padded row's padding)."""
    first_real = token_is_real.int().argmax(dim=1)
    return states[torch.arange(states.shape[0], device=states.device), first_real]


# `classifier_pooling` -> how the encoder output is pooled; "decoder" reads it with the decoder instead.
ENCODER_POOLINGS = {"mean": mean_pooling, "max": max_pooling, "first": first_token_pooling}

# The rolling hash of runs multiplies by a prime above any vocabulary size and the code points of the Basic
# Multilingual Plane, spreading runs over buckets.
NGRAM_HASH_MULTIPLIER = 1_000_003
# `classifier_ngram_unit="character"` reads at most this many characters of each token (longer pieces are rare:
# the longest of a 16k BPE vocabulary over Korean reviews has 15).
NGRAM_CHARACTERS_PER_TOKEN = 16


def ngram_hashes(
    units: torch.Tensor, unit_is_real: torch.Tensor, order: int, buckets: int, kind: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S), (B, S) -> (B, N), (B, N): the bucket of every run of 1 to ``order`` consecutive units (token ids or
    character code points), runs of length 1 first, and whether the run lies on real units alone. A run's bucket
    depends only on its units, length and ``kind``, so a sentence gets the same buckets however it is padded (left or
    right) or batched. A run's hash starts from its length plus ``kind * order``: runs of two kinds of unit in one
    table (tokens, kind 1, beside characters, kind 0) with the same numbers fall into different buckets."""
    length = units.shape[1]
    hashes, exists = [], []
    for n in range(1, order + 1):
        if n > length:
            break
        run_hash = torch.full_like(units[:, : length - n + 1], n + kind * order)
        run_real = torch.ones_like(run_hash, dtype=torch.bool)
        for k in range(n):
            run_hash = (run_hash * NGRAM_HASH_MULTIPLIER + units[:, k : length - n + 1 + k]) % buckets
            run_real = run_real & unit_is_real[:, k : length - n + 1 + k]
        hashes.append(run_hash)
        exists.append(run_real)
    return torch.cat(hashes, dim=1), torch.cat(exists, dim=1)


def token_characters_in_a_row(
    input_ids: torch.Tensor, token_is_real: torch.Tensor, token_characters: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) ids -> (B, S * W) the characters of the real tokens one after the other, without the spaces between
    words (code points from the (V, W) ``token_characters``, 0 where a token has fewer), and which are real. The
    characters are moved to the front of their row, so runs of characters cross token and word boundaries."""
    characters = (token_characters[input_ids] * token_is_real.unsqueeze(-1)).flatten(1)  # (B, S, W) -> (B, S * W)
    present = characters != 0
    # Each character's place in its row; the empty slots all go to one spare slot past the end (writing zeros).
    place = torch.where(present, present.cumsum(1) - 1, characters.shape[1])
    packed = torch.zeros_like(characters[:, :1]).expand(-1, characters.shape[1] + 1).clone()
    packed = packed.scatter(1, place, characters)[:, :-1]
    return packed, packed != 0


class NgramClassifier(nn.Module):
    """A linear classifier over the bag of the input's n-grams (fastText, NBSVM; Wide & Deep's wide part): of its
    tokens, of its characters, or of both (`config.classifier_ngram_unit`).

    Each n-gram occurrence's feature is its inverse document frequency (``idf``; 0 for n-grams too rare to keep),
    the sentence's occurrences of one kind scaled to unit length together; the score is their dot product with
    ``weight`` (one row per bucket) plus ``bias``.
    - "token": tokens are read through ``canonical_ids``, which can map a word-initial piece ("▁film") and the same
      piece inside a word ("film") to one id, so that the n-grams do not depend on how the text was spaced.
    - "character": each token is read as its characters (``token_characters``, the piece's text without its
      word-start mark; special tokens have none), so the n-grams are those of the text with its spaces removed,
      across the tokenizer's cuts, whatever the vocabulary.
    - "token+character": both bags in one table, each of unit length (so a short row's few token n-grams weigh as
      much as its many character n-grams); token runs are hashed apart from character runs. For a tokenizer that
      cuts text into morphemes, whose n-grams can tell what characters alone do not.
    Nothing here is trained by back-propagation: ``hf_transformer.ngram_classifier.fit_ngram_classifier`` fits it
    (a logistic regression), fills the tables it reads tokens through and sets how much it weighs beside the encoder.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.unit = config.classifier_ngram_unit
        self.order = config.classifier_ngram_order
        self.token_order = config.classifier_ngram_token_order or self.order
        self.buckets = config.classifier_ngram_buckets
        self.reads_tokens = self.unit in ("token", "token+character")
        self.reads_characters = self.unit in ("character", "token+character")
        self.weight = nn.Parameter(torch.zeros(self.buckets, config.num_labels))
        self.bias = nn.Parameter(torch.zeros(config.num_labels))
        self.idf = nn.Buffer(torch.zeros(self.buckets))
        # While True the classifier's forward adds nothing for this score, which is then zero and untrained
        # (set by `hf_transformer.ngram_classifier.ngram_score_left_out` around the encoder's training).
        self.left_out = False
        if self.reads_characters:
            self.token_characters = nn.Buffer(
                torch.zeros(config.vocab_size, NGRAM_CHARACTERS_PER_TOKEN, dtype=torch.long)
            )
        if self.reads_tokens:
            self.canonical_ids = nn.Buffer(torch.arange(config.vocab_size))

    def units(
        self, input_ids: torch.Tensor, token_is_real: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor, int, int]]:
        """(B, S) -> for each kind of unit read (tokens, then characters): (B, U) what the n-grams are runs of (token
        ids, or the tokens' characters packed to the front of the row), (B, U) which are real, the kind's number in
        the hash (`ngram_hashes`: tokens beside characters hash apart; a single kind as it always has) and its
        longest run."""
        kinds = []
        if self.reads_tokens:
            kinds.append((self.canonical_ids[input_ids], token_is_real, int(self.reads_characters), self.token_order))
        if self.reads_characters:
            # The plain packing, or one as wide as the rows' characters (speed.pack_token_characters).
            characters = pack_token_characters(
                input_ids, token_is_real, self.token_characters, token_characters_in_a_row
            )
            kinds.append((*characters, 0, self.order))
        return kinds

    def ngrams(self, input_ids: torch.Tensor, token_is_real: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(B, S) -> for each kind of unit, (B, N) buckets of the input's n-grams, (B, N) which exist."""
        return [
            ngram_hashes(units, is_real, order, self.buckets, kind)
            for units, is_real, kind, order in self.units(input_ids, token_is_real)
        ]

    def features(self, input_ids: torch.Tensor, token_is_real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) -> (B, N) buckets and (B, N) feature values (0 where no n-gram or a dropped one)."""
        return self.ngram_features(self.ngrams(input_ids, token_is_real))

    def ngram_features(self, kinds: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """For each kind of unit (B, N) buckets and (B, N) which exist -> all the buckets and their feature values,
        each kind's of unit length in each row. The values are float32 whatever the model's dtype: a long row's sum of
        squared idf values passes float16's largest number, which would make every feature 0."""
        hashes, values = [], []
        for kind_hashes, exists in kinds:
            kind_values = self.idf[kind_hashes].float() * exists
            hashes.append(kind_hashes)
            values.append(kind_values / kind_values.square().sum(1, keepdim=True).sqrt().clamp(min=1e-12))
        return torch.cat(hashes, 1), torch.cat(values, 1)

    def resize_vocabulary(self, size: int) -> None:
        """Keep the tables tokens are read through at the vocabulary's size (`resize_token_embeddings`): the kept
        tokens read as before; a new token reads as itself (tokens) or as no characters (characters) until
        `fit_ngram_classifier` fills the tables from the tokenizer again."""
        if self.reads_characters:
            table = self.token_characters.new_zeros(size, NGRAM_CHARACTERS_PER_TOKEN)
            kept = min(size, self.token_characters.shape[0])
            table[:kept] = self.token_characters[:kept]
            self.token_characters = nn.Buffer(table)
        if self.reads_tokens:
            ids = torch.arange(size, device=self.canonical_ids.device)
            kept = min(size, self.canonical_ids.shape[0])
            old = self.canonical_ids[:kept]
            ids[:kept] = torch.where(old < size, old, ids[:kept])  # a piece mapped to a dropped one reads as itself
            self.canonical_ids = nn.Buffer(ids)

    def forward(self, input_ids: torch.Tensor, token_is_real: torch.Tensor) -> torch.Tensor:
        hashes, values = self.features(input_ids, token_is_real)
        # A sum of products rather than a matrix product: autocast leaves it in float32; a float16 or bfloat16 model's
        # score is summed in float32 too and given in the model's dtype.
        score = (values.unsqueeze(-1) * self.weight[hashes].float()).sum(1) + self.bias.float()
        return score.to(self.weight.dtype)  # (B, num_labels)


@auto_docstring(
    custom_intro="""
    A linear classifier over a pooled representation (`config.classifier_pooling`): "mean" / "max" over the
    encoder's non-pad tokens, "first" encoder token, or "decoder": the decoder reads one start token over the encoder
    output, as in the seed tutorial's sentiment model. Encoder pooling returns [`EncoderSequenceClassifierOutput`];
    the decoder read-out returns `Seq2SeqSequenceClassifierOutput`, the decoder's and the encoder's outputs under
    their seq2seq names. With `config.classifier_ngram_buckets` a linear score over the input's token or character
    n-grams ([`NgramClassifier`]) is added to the logits.
    """
)
class TransformerForSequenceClassification(TransformerPreTrainedModel):
    # The loss is a mean over the model's own batch; Trainer must not pass `num_items_in_batch` and must
    # divide by the accumulation steps itself (it would otherwise scale the loss by the world size).
    accepts_loss_kwargs = False

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = TransformerModel(config, add_decoder=config.classifier_pooling == "decoder")
        self.dropout = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        # CODEPATH: `--ngram_buckets` of train_classifier.py (the main job); no n-gram score by default.
        self.ngram_classifier = NgramClassifier(config) if config.classifier_ngram_buckets else None
        self.post_init()

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        if self.model.decoder is not None and not self.config.share_embeddings:
            # As the seq2seq head: the decoder's own table would keep its size under a config that names another.
            raise ValueError(
                "resize_token_embeddings resizes the one shared vocabulary; this classifier's decoder read-out has "
                "a token table of its own (share_embeddings=False)."
            )
        old_size = self.get_input_embeddings().weight.shape[0]
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.decoder_vocab_size = self.config.vocab_size  # one vocabulary (the config checks it)
        if self.ngram_classifier is not None:
            self.ngram_classifier.resize_vocabulary(embeddings.weight.shape[0])
            if embeddings.weight.shape[0] > old_size:
                logger.warning(
                    "The n-gram score reads the %d new tokens as %s until fit_ngram_classifier is run again.",
                    embeddings.weight.shape[0] - old_size,
                    {"token": "themselves", "character": "no characters"}.get(
                        self.ngram_classifier.unit, "themselves and as no characters"
                    ),
                )
        return embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> EncoderSequenceClassifierOutput | Seq2SeqSequenceClassifierOutput:
        r"""
        labels (`torch.Tensor` of shape `(batch_size,)` or `(batch_size, num_labels)`, *optional*):
            Class ids (single-label), targets (regression) or 0/1 per label (multi-label); the loss follows
            `config.problem_type`, or the labels when it is None.
        """
        check_no_misspelt_arguments(TransformerForSequenceClassification.forward, kwargs)
        if self.ngram_classifier is not None and input_ids is None:
            raise ValueError(
                "This classifier adds a score over the input's n-grams (`classifier_ngram_buckets`), "
                "which needs `input_ids`; `inputs_embeds` alone cannot give it."
            )
        flags = _recording_flags(kwargs, self.config)
        encoder_outputs = self.model.encoder(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, return_dict=True, **flags
        )
        encoder_states = encoder_outputs.last_hidden_state  # (B, S, D)
        token_is_real = _padding_mask(input_ids, attention_mask, self.config.pad_token_id)
        if token_is_real is None:
            token_is_real = torch.ones(encoder_states.shape[:2], dtype=torch.bool, device=encoder_states.device)

        decoder_outputs = None
        # CODEPATH: "decoder" is the seed tutorial's sentiment classifier (its checkpoints, convert.from_seed); the
        # classifiers `train_classifier.py` trains and the saved folder classifier pool the encoder ("mean").
        if self.config.classifier_pooling == "decoder":
            pooled, decoder_outputs = self._decoder_read_out(encoder_states, token_is_real, **flags)
        else:
            pooled = ENCODER_POOLINGS[self.config.classifier_pooling](encoder_states, token_is_real)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        if self.ngram_classifier is not None and self.ngram_classifier.left_out:
            # A zero score, not computed: the logits in the dtype the sum would have (float32 under autocast).
            logits = logits.to(torch.promote_types(logits.dtype, self.ngram_classifier.weight.dtype))
        elif self.ngram_classifier is not None:
            logits = logits + self.ngram_classifier(input_ids, token_is_real)

        loss = self._classification_loss(logits, labels) if labels is not None else None
        if decoder_outputs is None:
            return EncoderSequenceClassifierOutput(
                loss=loss,
                logits=logits,
                hidden_states=encoder_outputs.hidden_states,
                attentions=encoder_outputs.attentions,
                last_hidden_state=encoder_states,
            )
        return seq2seq_output(
            Seq2SeqSequenceClassifierOutput, decoder_outputs, encoder_outputs, loss=loss, logits=logits
        )

    def _decoder_read_out(
        self, encoder_states: torch.Tensor, token_is_real: torch.Tensor, **flags
    ) -> tuple[torch.Tensor, BaseModelOutputWithPastAndCrossAttentions]:
        """The seed tutorial's read-out: the decoder reads one start token over the encoder output (B, S, D); its
        output, max-pooled over that one position, is the representation (B, D)."""
        start = torch.full(
            (encoder_states.shape[0], 1), self.config.decoder_start_token_id, device=encoder_states.device
        )
        decoder_outputs = self.model.decoder(
            input_ids=start,
            encoder_hidden_states=encoder_states,
            encoder_attention_mask=token_is_real,
            return_dict=True,
            **flags,
        )
        return decoder_outputs.last_hidden_state.max(dim=1).values, decoder_outputs

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean squared error (regression), cross-entropy (single-label) or binary cross-entropy (multi-label),
        the problem told by the config or by the labels (``input_checks.classification_problem``)."""
        labels = labels.to(logits.device)
        problem_type = classification_problem(labels, logits.shape[0], self.num_labels, self.config.problem_type)
        self.config.problem_type = problem_type
        if problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.squeeze(-1).float())
        if problem_type == "single_label_classification":
            flat = labels.reshape(-1)
            check_labels_in_range(flat, self.num_labels)
            return F.cross_entropy(logits.float().reshape(-1, self.num_labels), flat)
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


# ---------------------------------------------------------------------------------------------------
# Masked-token prediction (pretraining the classifier's encoder)
# ---------------------------------------------------------------------------------------------------


@auto_docstring(
    custom_intro="""
    The encoder alone (the classifier's parameter names, `model.encoder.*`) predicting masked tokens: dense -> GELU
    -> LayerNorm, then the token table as output projection, plus a bias.

    With `labels` (B, S; the original token where one is to be predicted, -100 elsewhere) the logits are computed only
    at the predicted positions, (N, V) in the order of `labels[labels != -100]`, which keeps the vocabulary-wide
    softmax to the few masked tokens; the loss is their mean cross-entropy. Without `labels` the logits cover every
    position, (B, S, V), as the fill-mask pipeline reads them. In training the loss is fused with the projection
    (`config.fused_output_loss`) and `logits` is None.
    """
)
class TransformerForMaskedLM(TransformerPreTrainedModel):
    # The loss is a mean over this batch's predicted tokens; Trainer must not pass `num_items_in_batch`.
    accepts_loss_kwargs = False

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.model = TransformerModel(config, add_decoder=False)
        # An `nn.Sequential`, whose weights are named by index (`transform.0`, `transform.2`): the folders saved
        # by this head so far hold those names, and another module would need a renaming on every load.
        self.transform = nn.Sequential(
            nn.Linear(config.d_model, config.d_model),
            nn.GELU(),
            nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon),
        )
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        old_bias, size = self.output_bias.data, embeddings.weight.shape[0]
        new_bias = old_bias.new_zeros(size)
        new_bias[: min(size, old_bias.shape[0])] = old_bias[:size]  # new tokens start without a bias
        self.output_bias = nn.Parameter(new_bias)
        self.config.decoder_vocab_size = self.config.vocab_size  # one vocabulary (the config checks it)
        return embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            The original token where one is to be predicted, -100 elsewhere; the logits then cover the predicted
            positions only.
        """
        check_no_misspelt_arguments(TransformerForMaskedLM.forward, kwargs)
        check_one_token_table(self.model, self.config, tied_output=self.config.tie_word_embeddings)
        encoder_outputs = self.model.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **_recording_flags(kwargs, self.config),
        )
        states = encoder_outputs.last_hidden_state  # (B, S, D)
        if labels is not None:
            if tuple(labels.shape) != tuple(states.shape[:2]) or labels.is_floating_point():
                raise ValueError(
                    f"`labels` must be integer token ids (or -100) of the inputs' shape {tuple(states.shape[:2])}; "
                    f"got {labels.dtype} of shape {tuple(labels.shape)}."
                )
            check_labels_in_range(labels, self.config.vocab_size)
            labels = labels.to(states.device)
            predicted = labels != -100
            states, labels = states[predicted], labels[predicted]  # (N, D), (N,)
        logits, loss = self.logits_and_loss(states, labels)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=encoder_outputs.hidden_states, attentions=encoder_outputs.attentions
        )

    def logits_and_loss(
        self, states: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """logits = LayerNorm(GELU(states W + b)) E^T + output_bias, E the token table, and with ``labels`` their mean
        cross-entropy (:meth:`loss`). In a training step (``config.fused_output_loss``) the loss is computed without
        holding the logits, which are then None (``speed.output_logits_and_loss``)."""
        return output_logits_and_loss(
            self.get_input_embeddings().weight,
            self.transform(states),
            labels,
            self.loss,
            bias=self.output_bias,
            fuse=self.config.fused_output_loss,
            training=self.training,
        )

    def loss(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Mean cross-entropy of the predicted tokens, logits (N, V) and labels (N,); 0 when none is predicted."""
        if not labels.numel():
            return logits.sum() * 0.0  # a batch that masked nothing still has a (zero) gradient
        return F.cross_entropy(logits.float(), labels.to(logits.device))


__all__ = [
    "TransformerPreTrainedModel",
    "TransformerModel",
    "TransformerForConditionalGeneration",
    "TransformerForSequenceClassification",
    "TransformerForMaskedLM",
    "EncoderSequenceClassifierOutput",
    "TransformerEncoder",
    "TransformerDecoder",
    "sinusoid_table",
    "shift_tokens_right",
]
