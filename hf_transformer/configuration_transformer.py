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
"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need".

The canonical field names follow BART (``d_model``, ``encoder_layers``, ...), because transformers'
generation and cache utilities read those. The names of the seed tutorial (``d_hidn``, ``n_head``,
``n_enc_vocab``, ...) and the HF standard names (``hidden_size``, ``num_hidden_layers``, ...) are
aliases: they are accepted by the constructor and read and written through ``attribute_map``.

The settings are checked by ``huggingface_hub``'s strict dataclasses, as transformers' own configurations are: each
field's type (``Literal`` for the options) and range (:func:`positive`, :func:`probability`, :func:`token_id`) when
it is set, at construction and on assignment, and the checks between settings (the ``validate_*`` methods) at
construction and before saving (``validate``, which ``save_pretrained`` calls), so that a config that was saved
always loads. The library's errors are not ``ValueError``s; :class:`InvalidConfigError` carries their message and is
both, so that code catching ``ValueError`` for a bad setting (the scripts, the app) still does.

What the library cannot express stays written here:

- the aliases given to the constructor and their conflicts (``n_layer`` sets two fields, a seed name and its
  canonical name given together must agree);
- an unknown keyword refused with the closest name (the constructor ``PretrainedConfig`` gives a subclass takes any
  keyword, as ``strict(accept_kwargs=True)`` would; refusing them all, the library would name no close name, and
  would refuse the keys other tools add to saved configs);
- the settings derived from others when not given (``head_dim``, ``decoder_vocab_size``...), derived again when
  None is assigned, and ``head_dim``'s divisibility when it is derived;
- a saved config read leniently: unknown keys kept as attributes, a ``problem_type`` saved before it was checked
  read as None, a both-stack depth or an alias that contradicts the saved fields ignored (with a warning);
- the checks between settings on assignment: the library runs them at construction and in ``validate`` only, so
  ``config.decoder_vocab_size = 30`` under ``share_embeddings`` is refused when the config is saved, not before.
"""

import contextlib
import contextvars
import dataclasses
import difflib
import functools
import inspect
import logging
import math
import warnings
from typing import Literal, get_args

from huggingface_hub.dataclasses import strict, validated_field
from huggingface_hub.errors import StrictDataclassError
from transformers import GenerationConfig, PretrainedConfig
from transformers.utils import auto_docstring

logger = logging.getLogger(__name__)

LayerNormPosition = Literal["post", "pre"]
PositionEmbeddingType = Literal["sinusoidal", "learned"]
ActivationFunction = Literal["relu", "gelu"]
ClassifierPooling = Literal["mean", "max", "first", "decoder"]
NgramUnit = Literal["token", "character", "token+character"]
InitMethod = Literal["normal", "xavier_uniform"]
# The loss a classifier computes (transformers' names, read by `TransformerForSequenceClassification`).
ProblemType = Literal["regression", "single_label_classification", "multi_label_classification"]

LAYER_NORM_POSITIONS = get_args(LayerNormPosition)
POSITION_EMBEDDING_TYPES = get_args(PositionEmbeddingType)
ACTIVATION_FUNCTIONS = get_args(ActivationFunction)
CLASSIFIER_POOLINGS = get_args(ClassifierPooling)
INIT_METHODS = get_args(InitMethod)
PROBLEM_TYPES = get_args(ProblemType)

# alias -> canonical field. One-to-one aliases only; ``n_layer`` and ``num_hidden_layers`` given to the
# constructor set both stacks and are handled in ``__post_init__``.
_ALIASES = {
    # seed tutorial names
    "n_enc_vocab": "vocab_size",
    "n_dec_vocab": "decoder_vocab_size",
    "n_enc_seq": "max_position_embeddings",
    "n_dec_seq": "decoder_max_position_embeddings",
    "d_hidn": "d_model",
    "n_head": "num_attention_heads",
    "d_head": "head_dim",
    "d_ff": "intermediate_size",
    "i_pad": "pad_token_id",
    # HF standard / BART names
    "hidden_size": "d_model",
    "encoder_attention_heads": "num_attention_heads",
    "decoder_attention_heads": "num_attention_heads",
    "encoder_ffn_dim": "intermediate_size",
    "decoder_ffn_dim": "intermediate_size",
    "ffn_dim": "intermediate_size",
    "layer_norm_eps": "layer_norm_epsilon",
}
_BOTH_STACK_LAYER_ALIASES = ("n_layer", "num_hidden_layers")


def _base_config_keys() -> frozenset[str]:
    """Keys that ``PretrainedConfig`` itself owns, read off the installed base class: its dataclass fields, what
    it writes into config.json, and its settable properties (``num_labels``, ``torch_dtype``...; a private
    property such as ``_attn_implementation`` is set through its public name ``attn_implementation``)."""
    keys = {field.name for field in dataclasses.fields(PretrainedConfig)}
    keys.update(PretrainedConfig().to_dict())
    for name, member in inspect.getmembers(PretrainedConfig):
        if isinstance(member, property) and member.fset is not None:
            keys.update((name, name.lstrip("_")))
    return frozenset(keys)


# Keys `PretrainedConfig` no longer declares but transformers still reads off a config by name, so a person may
# set them on any config: `AutoTokenizer` takes `config.tokenizer_class` when a folder's tokenizer_config.json
# names no class.
_ECOSYSTEM_KEYS = frozenset({"tokenizer_class"})

_BASE_KEYS = _base_config_keys() | _ECOSYSTEM_KEYS

# Set while a config is read back from a dictionary or config.json (`from_dict`, `from_json_file`, and
# `from_pretrained` through `from_dict`): unknown keys are then kept as attributes, as `PretrainedConfig` keeps
# them, because other tools and users add attributes to configs before saving. Only what a person passes to
# the constructor is checked for misspellings.
_READING_SAVED_CONFIG: contextvars.ContextVar[bool] = contextvars.ContextVar("_READING_SAVED_CONFIG", default=False)


# Saved class name -> the `transformers.Pipeline` class that serves its folders, registered in transformers'
# PIPELINE_REGISTRY (`hf_transformer` registers its translation pipeline for the seq2seq class on import). A folder
# saved with one names it in `custom_pipelines` and carries its code: see `hf_transformer.checkpoint`.
_FOLDER_PIPELINES: dict[str, type] = {}


def _served_here(custom_pipelines: dict) -> dict:
    """The entries of a saved folder's ``custom_pipelines`` whose task a pipeline registered here does not serve."""
    served = {task for pipeline in _FOLDER_PIPELINES.values() for task in pipeline._registered_impl}
    return {task: entry for task, entry in custom_pipelines.items() if task not in served}


# The fields a person's keyword arguments name, set while the constructor runs: an alias given beside its field
# conflicts when the two differ, also where the field's value is its default.
_GIVEN_FIELDS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("_GIVEN_FIELDS", default=frozenset())


def _both_stack_depth(settings: dict) -> int | None:
    """The depth of both stacks that ``settings`` give under `n_layer` or `num_hidden_layers` (None if neither);
    two different ones are refused."""
    depths = {alias: settings[alias] for alias in _BOTH_STACK_LAYER_ALIASES if alias in settings}
    if len(set(depths.values())) > 1:
        raise ValueError(f"TransformerConfig: {depths} give two depths of both stacks; give one")
    return next(iter(depths.values()), None)


@contextlib.contextmanager
def _reading_saved_config():
    token = _READING_SAVED_CONFIG.set(True)
    try:
        yield
    finally:
        _READING_SAVED_CONFIG.reset(token)


def _as_list(value) -> list:
    """A setting that may hold one value or a list of them, as a list (empty for None)."""
    return list(value) if isinstance(value, list) else ([] if value is None else [value])


def _lenient(config_dict: dict) -> dict:
    """A saved config as it is read: a ``problem_type`` saved before assignments were checked (the classifier then
    trained with binary cross-entropy, its fallback) is read as None, with a warning, so that the folder still loads
    and the loss is chosen from the labels, as for None."""
    problem_type = config_dict.get("problem_type")
    if problem_type is None or problem_type in PROBLEM_TYPES:
        return config_dict
    logger.warning(
        "TransformerConfig: the saved `problem_type` %r is not one of %s; it is read as None (the loss is chosen "
        "from the labels).",
        problem_type,
        list(PROBLEM_TYPES),
    )
    return {**config_dict, "problem_type": None}


# What a setting may hold beyond its type, checked by the library whenever the setting is set (None, where the type
# allows it, is a setting derived from another one).
def positive(default):
    """A field holding a number > 0."""

    def check(value) -> None:
        if value is not None and not value > 0:
            raise ValueError(f"must be a positive number, got {value!r}")

    return validated_field(check, default=default)


def count(default):
    """A field holding a whole number >= 0 (0 switches the feature it sizes off)."""

    def check(value) -> None:
        if value is not None and (isinstance(value, bool) or value < 0):
            raise ValueError(f"must be a whole number >= 0, got {value!r}")

    return validated_field(check, default=default)


def probability(default):
    """A field holding a rate in [0, 1)."""

    def check(value) -> None:
        if value is not None and not 0.0 <= value < 1.0:
            raise ValueError(f"must be a number in [0, 1), got {value!r}")

    return validated_field(check, default=default)


def token_id(default):
    """A field holding a token id (>= 0), or a list of them where the type allows one; whether each is inside the
    vocabulary is checked with the vocabulary."""

    def check(value) -> None:
        for token in _as_list(value):
            if token < 0:
                raise ValueError(f"must be a token id (an integer >= 0), got {value!r}")
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one token id, got []")

    return validated_field(check, default=default)


class InvalidConfigError(StrictDataclassError, ValueError):
    """A setting ``TransformerConfig`` cannot hold: ``huggingface_hub``'s strict-dataclass error (its message names
    the field or the check), raised as a ``ValueError`` too."""


def _raise_value_errors(config_class: type) -> type:
    """Makes the errors of the library's checks in ``config_class``'s constructor, assignments and ``validate``
    :class:`InvalidConfigError`s. An assignment through an alias names the alias too."""

    def reraised(method, name: str):
        @functools.wraps(method)
        def checked(self, *args, **kwargs):
            given = _GIVEN_FIELDS.set(frozenset(kwargs)) if name == "__init__" else None
            try:
                return method(self, *args, **kwargs)
            except StrictDataclassError as error:
                if isinstance(error, ValueError):
                    raise
                message = str(error)
                if name == "__setattr__" and args[0] in type(self).attribute_map:
                    message += f" (assigned as `{args[0]}`)"
                raise InvalidConfigError(message) from error
            finally:
                if given is not None:
                    _GIVEN_FIELDS.reset(given)

        return checked

    for name in ("__init__", "__setattr__", "validate"):
        setattr(config_class, name, reraised(getattr(config_class, name), name))
    return config_class


@auto_docstring(
    custom_intro="""
    Configuration of [`TransformerModel`] and its heads. Defaults are the seed tutorial's model (d_model 256, 6 + 6
    post-LN layers, 4 heads of 64, GELU, frozen sinusoid positions, vocabulary 8007, pad id 0). [`paper_base`],
    [`paper_big`] and [`seed_tutorial`] build the ready configurations. The seed tutorial's names (in brackets below)
    and the HF standard names (`hidden_size`, `num_hidden_layers`, ...) are aliases of the fields.

    Unknown keyword arguments raise `ValueError` (with the closest known name), so a misspelled option never passes
    silently; so does assigning a built config a new attribute close to a setting's name (`config.dropuot = 0.3`),
    while any other new attribute is set as `PretrainedConfig` sets it. A config read back from a dictionary or
    config.json (`from_dict`, `from_json_file`, `from_pretrained`) keeps unknown keys as attributes instead, as
    `PretrainedConfig` does, and saves them again: other tools and users add attributes to a config before saving it
    (a key close to a known setting is logged as a warning). Generation settings (`num_beams`, `max_length`...) belong
    on `model.generation_config`; given here they are dropped with a warning. A value a setting cannot hold raises
    [`InvalidConfigError`] (a `ValueError`) naming the setting.
    """
)
@_raise_value_errors
# As BART's: `PretrainedConfig` already gives a subclass an `__init__` that takes any keyword (what `accept_kwargs=True`
# would add), which `__post_init__` below sorts into aliases, refusals and kept attributes.
@strict
class TransformerConfig(PretrainedConfig):
    r"""
    vocab_size (`int`, *optional*, defaults to 8007):
        Encoder vocabulary (`n_enc_vocab`).
    decoder_vocab_size (`int`, *optional*):
        Decoder and output vocabulary (`n_dec_vocab`); defaults to `vocab_size`.
    max_position_embeddings (`int`, *optional*, defaults to 256):
        Longest source sequence (`n_enc_seq`).
    decoder_max_position_embeddings (`int`, *optional*):
        Longest target sequence (`n_dec_seq`); defaults to `max_position_embeddings`.
    d_model (`int`, *optional*, defaults to 256):
        The model's width, the paper's d_model (`d_hidn`, `hidden_size`).
    encoder_layers (`int`, *optional*, defaults to 6):
        Encoder layers; `n_layer` or `num_hidden_layers` given to the constructor set both stacks.
    decoder_layers (`int`, *optional*, defaults to 6):
        Decoder layers.
    num_attention_heads (`int`, *optional*, defaults to 4):
        Attention heads in every attention (`n_head`).
    head_dim (`int`, *optional*):
        Per-head size (`d_head`); `num_attention_heads * head_dim` need not equal `d_model`. Defaults to
        `d_model // num_attention_heads`.
    intermediate_size (`int`, *optional*, defaults to 1024):
        Feed-forward size (`d_ff`).
    dropout (`float`, *optional*, defaults to 0.1):
        Dropout on the residual branches and the embeddings.
    attention_dropout (`float`, *optional*):
        Dropout on the attention probabilities; defaults to `dropout`, as in the seeds.
    activation_dropout (`float`, *optional*, defaults to 0.0):
        Dropout inside the feed-forward.
    classifier_dropout (`float`, *optional*):
        Dropout before the classifier; defaults to `dropout`.
    label_smoothing (`float`, *optional*, defaults to 0.0):
        Label smoothing of the seq2seq loss.
    layer_norm_epsilon (`float`, *optional*, defaults to 1e-12):
        The LayerNorms' epsilon.
    embedding_layer_norm_epsilon (`float`, *optional*):
        Epsilon of the LayerNorm after the embeddings; defaults to `layer_norm_epsilon`.
    layer_norm_position (`str`, *optional*, defaults to `"post"`):
        `"post"`: LayerNorm after each residual sum (the paper); `"pre"`: on each sub-layer's input (book-style).
    position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
        `"sinusoidal"`: a frozen table, position 0 reserved for padding, tokens numbered from 1; `"learned"`: a
        trained table numbered from 0.
    embedding_layer_norm (`bool`, *optional*, defaults to `False`):
        A LayerNorm after the embedding sum.
    scale_embedding (`bool`, *optional*, defaults to `False`):
        Multiply the token embeddings by sqrt(d_model), as the paper does.
    final_layer_norm (`bool`, *optional*):
        A LayerNorm after each stack; defaults to True for pre-LN, False for post-LN.
    activation_function (`str`, *optional*, defaults to `"gelu"`):
        The feed-forward's activation, `"relu"` (the paper) or `"gelu"` (the seeds).
    share_embeddings (`bool`, *optional*, defaults to `True`):
        One token table for the encoder and the decoder (one vocabulary).
    tie_word_embeddings (`bool`, *optional*, defaults to `True`):
        The output projection is the decoder's token table.
    classifier_pooling (`str`, *optional*, defaults to `"mean"`):
        What the sequence classifier reads: `"mean"` or `"max"` over the non-pad encoder tokens, `"first"` encoder
        token, or `"decoder"` (the seed tutorial's way: the decoder reads one start token over the encoder output,
        max-pooled).
    classifier_ngram_buckets (`int`, *optional*, defaults to 0):
        The sequence classifier adds a linear score over the input's n-grams, hashed into this many buckets
        (fastText's and NBSVM's bag of n-grams beside the pooled encoder, as Wide & Deep's wide part); 0: none.
        Its weights are fitted apart from the encoder (`hf_transformer.ngram_classifier`). A power of two spreads
        the n-grams best: for some other counts (3,000,000) a small multiple of the rolling hash's multiplier lies a
        few units from a multiple of the count, and runs a few code points apart share buckets.
    classifier_ngram_order (`int`, *optional*, defaults to 3):
        The longest n-gram of that score: runs of 1 to this many consecutive units.
    classifier_ngram_unit (`str`, *optional*, defaults to `"token"`):
        What that score's n-grams are runs of: `"token"` (the token ids, word-initial pieces read as inner ones),
        `"character"` (the tokens' characters with the spaces between words removed, across the tokenizer's cuts) or
        `"token+character"` (both, in one table, each kind's features of unit length: for a tokenizer that cuts
        morphemes).
    classifier_ngram_token_order (`int`, *optional*):
        A `"token+character"` score's longest token n-gram (`classifier_ngram_order` is then the characters');
        defaults to `classifier_ngram_order`. Other units have one order and refuse it.
    fused_output_loss (`bool`, *optional*, defaults to `True`):
        In training, when `labels` are given, compute the output projection and the cross-entropy together, a few
        hundred rows at a time, without materialising the (batch, length, vocabulary) logits; the output's
        `logits` is then None. Same loss and gradients; set False to get the logits in training as well.
        Evaluation and generation always return logits.
    init_std (`float`, *optional*, defaults to 0.02):
        Standard deviation of the normal initialisation of the projections.
    init_method (`str`, *optional*, defaults to `"normal"`):
        Initialisation of a new model (loaded weights are never drawn again): `"normal"` (every projection from
        N(0, init_std), as BART) or `"xavier_uniform"` (the attention and feed-forward projections Glorot-uniform, as
        tensor2tensor, fairseq and the Annotated Transformer draw them, the query, key and value projections with
        gain 1/sqrt(2) as fairseq does; the heads' own projections stay normal). Token and position tables are drawn
        with std d_model^-0.5 either way.
    use_cache (`bool`, *optional*, defaults to `True`):
        Whether the decoder returns its cache of keys and values, for the next decoding step.
    pad_token_id (`int`, *optional*, defaults to 0):
        The padding token (`i_pad`); padding is derived from it.
    bos_token_id (`int`, *optional*, defaults to 2):
        The start token.
    eos_token_id (`int` or `list[int]`, *optional*, defaults to 3):
        The end token; a list names several (generation stops at any), the model's own first.
    decoder_start_token_id (`int`, *optional*):
        The token the decoder starts from; defaults to `bos_token_id`.
    is_encoder_decoder (`bool`, *optional*, defaults to `True`):
        The model is an encoder-decoder.
    problem_type (`str`, *optional*):
        The classifier's loss: `"regression"`, `"single_label_classification"` or `"multi_label_classification"`;
        chosen from the labels when None.
    """

    model_type = "hf_transformer"
    # Trainer puts every output field not named here into its predictions: the cache and the encoder states that
    # the heads return beside their logits are not predictions.
    keys_to_ignore_at_inference = ["past_key_values", "cache", "encoder_last_hidden_state", "last_hidden_state"]
    attribute_map = dict(_ALIASES, num_hidden_layers="encoder_layers")
    # transformers' FSDP2 loading (`from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=N))`) shards
    # each encoder and decoder layer as a unit (the stacks' own `_fsdp_plan`); the token tables, the final LayerNorms
    # and the output projection (one tensor, tied three ways) stay in the model's root unit. transformers' default plan
    # names modules of a decoder-only model (`embed_tokens`, `layers.*`, `norm` at the base), none of which is here.
    base_model_fsdp_plan = {}

    vocab_size: int = positive(default=8007)
    decoder_vocab_size: int | None = positive(default=None)
    max_position_embeddings: int = positive(default=256)
    decoder_max_position_embeddings: int | None = positive(default=None)
    # The paper's name for the model width (and BART's and Marian's); `hidden_size`, the name transformers' tools
    # look up, reads and writes it through `attribute_map`.
    d_model: int = positive(default=256)
    encoder_layers: int = positive(default=6)
    decoder_layers: int = positive(default=6)
    num_attention_heads: int = positive(default=4)
    head_dim: int | None = positive(default=None)
    intermediate_size: int = positive(default=1024)
    dropout: float | int = probability(default=0.1)
    attention_dropout: float | int | None = probability(default=None)
    activation_dropout: float | int = probability(default=0.0)
    classifier_dropout: float | int | None = probability(default=None)
    label_smoothing: float | int = probability(default=0.0)
    layer_norm_epsilon: float | int = positive(default=1e-12)
    embedding_layer_norm_epsilon: float | int | None = positive(default=None)
    layer_norm_position: LayerNormPosition = "post"
    position_embedding_type: PositionEmbeddingType = "sinusoidal"
    embedding_layer_norm: bool = False
    scale_embedding: bool = False
    final_layer_norm: bool | None = None
    activation_function: ActivationFunction = "gelu"
    share_embeddings: bool = True
    tie_word_embeddings: bool = True
    classifier_pooling: ClassifierPooling = "mean"
    classifier_ngram_buckets: int = count(default=0)
    classifier_ngram_order: int = positive(default=3)
    classifier_ngram_unit: NgramUnit = "token"
    classifier_ngram_token_order: int | None = positive(default=None)
    fused_output_loss: bool = True
    init_std: float | int = positive(default=0.02)
    init_method: InitMethod = "normal"
    use_cache: bool = True
    pad_token_id: int = token_id(default=0)
    bos_token_id: int | None = token_id(default=2)
    # A list names several end tokens, as transformers' configs allow (generation stops at any); the first is the
    # model's own, the one an engine that knows a single end token takes (`end_token_ids`).
    eos_token_id: int | list[int] | None = token_id(default=3)
    decoder_start_token_id: int | None = token_id(default=None)
    is_encoder_decoder: bool = True
    # `PretrainedConfig` declares it without a type the library checks.
    problem_type: ProblemType | None = None

    def __post_init__(self, **kwargs):
        kwargs = self._apply_aliases(kwargs)
        if isinstance(kwargs.get("custom_pipelines"), dict):
            # The package's own pipelines serve their tasks where it is installed: a saved folder's entries for them
            # are for remote code only, and read here they would make transformers ask for trust_remote_code.
            kwargs["custom_pipelines"] = _served_here(kwargs["custom_pipelines"])
            if not kwargs["custom_pipelines"]:
                del kwargs["custom_pipelines"]
        self._reject_unknown(kwargs)
        self._fill_defaults()
        super().__post_init__(**kwargs)

    # -- construction helpers -------------------------------------------------------------------
    def _apply_aliases(self, kwargs: dict) -> dict:
        for alias in _BOTH_STACK_LAYER_ALIASES:
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            conflicts = [
                f"`{field}`={current!r}"
                for field in ("encoder_layers", "decoder_layers")
                if self._given(field) and (current := object.__getattribute__(self, field)) != value
            ]
            if conflicts and _READING_SAVED_CONFIG.get():
                # A saved config's own stack depths are what its weights were saved with.
                logger.warning("TransformerConfig: saved `%s`=%r ignored; %s kept.", alias, value, ", ".join(conflicts))
                continue
            if conflicts:
                raise ValueError(
                    f"TransformerConfig: `{alias}`={value!r} sets both stacks and conflicts with "
                    f"{' and '.join(conflicts)}; give the depth once (or encoder_layers and decoder_layers alone)."
                )
            self.encoder_layers = value
            self.decoder_layers = value
        for alias, field in _ALIASES.items():
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            current = object.__getattribute__(self, field)
            if self._given(field) and current != value and _READING_SAVED_CONFIG.get():
                # A saved config's own field is what its weights were saved with.
                logger.warning("TransformerConfig: saved `%s`=%r ignored; `%s`=%r kept.", alias, value, field, current)
                continue
            if self._given(field) and current != value:
                raise ValueError(
                    f"TransformerConfig: `{alias}`={value!r} conflicts with `{field}`={current!r}; "
                    f"they name the same setting, give only one."
                )
            setattr(self, field, value)
        return kwargs

    def _given(self, field: str) -> bool:
        """Whether ``field`` was given beside an alias of it: named among the constructor's keywords (a person's, or
        a saved config's keys), or holding a value other than its default."""
        if field in _GIVEN_FIELDS.get():
            return True
        return object.__getattribute__(self, field) != type(self).__dataclass_fields__[field].default

    def _reject_unknown(self, kwargs: dict) -> None:
        generation_keys = set(GenerationConfig._get_default_generation_params())
        ignored = sorted(k for k in kwargs if k in generation_keys)
        if ignored:
            warnings.warn(
                f"TransformerConfig: generation settings {ignored} are ignored here; set them on "
                "`model.generation_config` instead.",
                stacklevel=6,
            )
        unknown = sorted(k for k in kwargs if k not in generation_keys and k not in _BASE_KEYS)
        if not unknown:
            return
        known = sorted(set(self.__dataclass_fields__) | set(_ALIASES) | set(_BOTH_STACK_LAYER_ALIASES) | _BASE_KEYS)
        hints = {key: difflib.get_close_matches(key, known, n=1) for key in unknown}
        described = [f"`{key}`" + (f" (did you mean `{close[0]}`?)" if close else "") for key, close in hints.items()]
        # `model_type` is written by `to_dict()` into every saved config and is never a setting one types:
        # `TransformerConfig(**config.to_dict())` and `AutoConfig.for_model(...)` read a saved config too.
        if not _READING_SAVED_CONFIG.get() and "model_type" not in kwargs:
            raise ValueError(f"TransformerConfig got unknown argument(s): {', '.join(described)}.")
        # Read back from a saved config: kept as attributes (the base class sets them in `__post_init__`). One
        # that looks like a misspelled setting is worth a warning; another tool's own attribute is not.
        misspelt = [key for key in unknown if difflib.get_close_matches(key, known, n=1, cutoff=0.8)]
        if misspelt:
            logger.warning(
                "TransformerConfig: config keys that look like misspelled settings are kept as attributes but not "
                "used: %s.",
                ", ".join(text for key, text in zip(unknown, described) if key in misspelt),
            )
        logger.info("TransformerConfig: keeping keys it does not use as attributes: %s", ", ".join(unknown))

    def _fill_defaults(self) -> None:
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        if self.decoder_max_position_embeddings is None:
            self.decoder_max_position_embeddings = self.max_position_embeddings
        if self.attention_dropout is None:
            self.attention_dropout = self.dropout
        if self.classifier_dropout is None:
            self.classifier_dropout = self.dropout
        if self.embedding_layer_norm_epsilon is None:
            self.embedding_layer_norm_epsilon = self.layer_norm_epsilon
        if self.final_layer_norm is None:
            self.final_layer_norm = self.layer_norm_position == "pre"
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.bos_token_id
        if self.head_dim is None:
            if self.d_model % self.num_attention_heads:
                raise ValueError(
                    f"TransformerConfig: `d_model` ({self.d_model}) must be divisible by "
                    f"`num_attention_heads` ({self.num_attention_heads}) when `head_dim` is not given; "
                    "pass `head_dim` (`d_head`) explicitly to use another per-head size."
                )
            self.head_dim = self.d_model // self.num_attention_heads

    # -- checks between settings, run by the library at construction and before saving --------------
    def validate_ngram_orders(self) -> None:
        if self.classifier_ngram_token_order is not None and self.classifier_ngram_unit != "token+character":
            raise ValueError(
                "`classifier_ngram_token_order` is the token n-grams' order beside the characters' in a "
                f'"token+character" score; the unit is "{self.classifier_ngram_unit}", whose one order is '
                "`classifier_ngram_order`."
            )

    def validate_labels(self) -> None:
        # The classifier's logits are indexed 0..num_labels-1 and each is named by `id2label`: an id outside that
        # range, or one missing, would fail by a bare KeyError in every entry point. A saved config is read as it is.
        ids = sorted(int(key) for key in (self.id2label or {}))
        if ids and ids != list(range(len(ids))) and not _READING_SAVED_CONFIG.get():
            raise ValueError(f"`id2label` must name the label ids 0 to {len(ids) - 1}, one each; got ids {ids}.")

    def validate_vocabularies(self) -> None:
        if self.share_embeddings and self.vocab_size != self.decoder_vocab_size:
            raise ValueError(
                "`share_embeddings=True` needs one vocabulary, but `vocab_size` (n_enc_vocab) is "
                f"{self.vocab_size} and `decoder_vocab_size` (n_dec_vocab) is {self.decoder_vocab_size}; set "
                "share_embeddings=False or make them equal."
            )

    def validate_token_ids(self) -> None:
        # In place of `PretrainedConfig`'s, which only warns: an id outside a vocabulary would fail in the model.
        smallest_vocab = min(self.vocab_size, self.decoder_vocab_size)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if any(token is not None and not token < smallest_vocab for token in _as_list(value)):
                raise ValueError(f"`{name}` must be an id in [0, {smallest_vocab}), got {value!r}.")
        if self.decoder_start_token_id is None:
            raise ValueError("set `decoder_start_token_id` or `bos_token_id`.")
        if self.decoder_start_token_id == self.pad_token_id:
            raise ValueError(
                f"`decoder_start_token_id` ({self.decoder_start_token_id}) equals `pad_token_id`; the start token "
                "would be treated as padding. Use a separate start token."
            )

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A saved config, read leniently (a saved config always loads), with the settings given as keywords
        (`TransformerConfig.from_pretrained(folder, dropout=0.3)`) set over it and checked as a person's settings
        are: a keyword that looks like a misspelt setting is refused (transformers would drop it silently unless
        `return_unused_kwargs`), and the settings are checked together again (a `vocab_size` beside a saved
        `decoder_vocab_size` of one shared table)."""
        return_unused_kwargs = kwargs.pop("return_unused_kwargs", False)
        # A both-stack depth sets both stacks, as given to the constructor (transformers would set the attribute
        # `num_hidden_layers` names, the encoder's, alone).
        depth = _both_stack_depth(kwargs)
        kwargs = {key: value for key, value in kwargs.items() if key not in _BOTH_STACK_LAYER_ALIASES}
        with _reading_saved_config():
            config, unused = super().from_dict(_lenient(config_dict), return_unused_kwargs=True, **kwargs)
        if depth is not None:
            config.encoder_layers = config.decoder_layers = depth
        cls._refuse_misspelt(unused)
        if set(kwargs) - set(unused) - {"_from_auto", "_from_pipeline", "name_or_path", "dtype", "torch_dtype"}:
            config.validate_ngram_orders()
            config.validate_vocabularies()
            config.validate_token_ids()
        return (config, unused) if return_unused_kwargs else config

    @classmethod
    def _refuse_misspelt(cls, keys) -> None:
        """Refuses the keys that look like misspelt settings (close to a known name), naming the closest."""
        known = sorted(set(cls.__dataclass_fields__) | set(_ALIASES) | set(_BOTH_STACK_LAYER_ALIASES))
        # Another special token's id (`mask_token_id`, `sep_token_id`) is an attribute of its own, not a misspelt
        # `pad_token_id`: the name is whole, only its token differs.
        keys = [key for key in keys if not key.endswith("_token_id")]
        misspelt = {key: difflib.get_close_matches(key, known, n=1, cutoff=0.8) for key in keys if key not in known}
        misspelt = {key: close[0] for key, close in misspelt.items() if close}
        if misspelt:
            named = ", ".join(f"`{key}` (did you mean `{close}`?)" for key, close in misspelt.items())
            raise ValueError(f"TransformerConfig has no setting {named}.")

    def save_pretrained(self, save_directory, *args, **kwargs):
        # Checked before anything is written: transformers writes this file's code beside the config (remote code)
        # before it checks the settings, which would leave a folder of code without a config.
        self.validate()
        return super().save_pretrained(save_directory, *args, **kwargs)

    def update(self, config_dict: dict) -> None:
        """`PretrainedConfig.update`, refusing a key that looks like a misspelt setting (``dropuot``) as the
        constructor does, before anything is set; a both-stack depth sets both stacks."""
        self._refuse_misspelt([key for key in config_dict if not hasattr(type(self), key)])
        depth = _both_stack_depth(config_dict)
        super().update({key: value for key, value in config_dict.items() if key not in _BOTH_STACK_LAYER_ALIASES})
        if depth is not None:
            self.encoder_layers = self.decoder_layers = depth

    @classmethod
    def from_json_file(cls, json_file):
        with _reading_saved_config():
            return cls(**_lenient(cls._dict_from_json_file(json_file)))

    def __setattr__(self, key, value):
        # An alias is set as the field it names, so that the library checks it as that field (its own check runs
        # on the name it is given).
        name = type(self).attribute_map.get(key, key)
        if (
            self.__dict__.get("_post_init_done", False)
            and not name.startswith("_")
            and not name.endswith("_token_id")  # another special token's (see `_refuse_misspelt`)
            and name not in self.__dict__
            and not hasattr(type(self), name)
            and not _READING_SAVED_CONFIG.get()
        ):
            # A new attribute on a built config (`config.dropuot = 0.3`) is refused when it looks like a misspelt
            # setting, as the constructor and `update` refuse it; another tool's own attribute is set as it is. The
            # cheap tests come first: transformers' `get_text_config` sets `start_token_id` on a copy inside
            # compiled code, which cannot trace the context variable.
            self._refuse_misspelt([name])
        super().__setattr__(name, value)
        # Assigning None to a setting derived from another one derives it again, as the constructor does.
        # `_post_init_done` is set by `PretrainedConfig.__post_init__`, after this class's own construction (a
        # private attribute of transformers, pinned in tests/test_private_hooks.py).
        if value is None and name in _DERIVED_WHEN_NONE and self.__dict__.get("_post_init_done", False):
            if self.__dict__.get("_deriving_defaults"):
                return  # the derivation below, assigning None itself where its source is None
            self.__dict__["_deriving_defaults"] = True
            try:
                self._fill_defaults()
            finally:
                del self.__dict__["_deriving_defaults"]
            if getattr(self, name) is None:
                raise ValueError(
                    f"TransformerConfig: `{name}` set to None is derived from the setting it defaults to, which is "
                    "None too; give it a value."
                )

    # -- seed-style names that are not one-to-one aliases ----------------------------------------
    @property
    def n_layer(self) -> int:
        if self.encoder_layers != self.decoder_layers:
            raise AttributeError(
                f"n_layer is ambiguous: encoder_layers={self.encoder_layers}, decoder_layers={self.decoder_layers}"
            )
        return self.encoder_layers

    @n_layer.setter
    def n_layer(self, value: int) -> None:
        self.encoder_layers = value
        self.decoder_layers = value

    @property
    def end_token_ids(self) -> tuple[int, ...]:
        """The end tokens `eos_token_id` names, the model's own first (none where it is None)."""
        return tuple(_as_list(self.eos_token_id))

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.d_model) if self.scale_embedding else 1.0

    # -- ready configurations ----------------------------------------------------------------------
    @classmethod
    def paper_base(cls, **overrides) -> "TransformerConfig":
        """Transformer base of the paper (table 3): d 512, 6 + 6 layers, 8 heads, ffn 2048, post-LN,
        ReLU, scaled and shared embeddings with a tied output projection, label smoothing 0.1."""
        settings = dict(
            vocab_size=37000,
            max_position_embeddings=512,
            d_model=512,
            n_layer=6,
            num_attention_heads=8,
            intermediate_size=2048,
            dropout=0.1,
            layer_norm_epsilon=1e-6,
            activation_function="relu",
            scale_embedding=True,
            layer_norm_position="post",
            label_smoothing=0.1,
        )
        return cls(**_preset(settings, overrides))

    @classmethod
    def paper_big(cls, **overrides) -> "TransformerConfig":
        """Transformer big of the paper: d 1024, 16 heads, ffn 4096, dropout 0.3."""
        settings = dict(d_model=1024, num_attention_heads=16, intermediate_size=4096, dropout=0.3)
        return cls.paper_base(**_preset(settings, overrides))

    @classmethod
    def seed_tutorial(cls, **overrides) -> "TransformerConfig":
        """The seed tutorial's config.json, in its own names."""
        settings = dict(
            n_enc_vocab=8007,
            n_dec_vocab=8007,
            n_enc_seq=256,
            n_dec_seq=256,
            n_layer=6,
            d_hidn=256,
            i_pad=0,
            d_ff=1024,
            n_head=4,
            d_head=64,
            dropout=0.1,
            layer_norm_epsilon=1e-12,
        )
        return cls(**_preset(settings, overrides))


# A preset's settings derived from others (the decoder's from the encoder's, the per-head size from the width and
# the heads): an override of the source, given without them, derives them again.
_PRESET_DERIVED = {
    "decoder_vocab_size": ("vocab_size",),
    "decoder_max_position_embeddings": ("max_position_embeddings",),
    "head_dim": ("d_model", "num_attention_heads"),
}


def _preset(settings: dict, overrides: dict) -> dict:
    """A ready configuration's settings with ``overrides`` over them, in any spelling: a preset setting that an
    override names by another spelling (``vocab_size`` over the seed's ``n_enc_vocab``) gives way to it, as does one
    derived from what the override sets; a both-stack depth gives way for the stack an override sets."""

    def fields(key: str) -> set[str]:
        return {"encoder_layers", "decoder_layers"} if key in _BOTH_STACK_LAYER_ALIASES else {_ALIASES.get(key, key)}

    overridden = set().union(*map(fields, overrides))
    kept = {}
    for key, value in settings.items():
        named = fields(key)
        derived_from = _PRESET_DERIVED.get(_ALIASES.get(key, key), ())
        if named & overridden or (derived_from and overridden & set(derived_from)):
            kept |= {stack: value for stack in named - overridden} if len(named) > 1 else {}
            continue
        kept[key] = value
    return {**kept, **overrides}


# Settings whose default is derived from another one: assigning None derives it again, as the constructor does.
_DERIVED_WHEN_NONE = (
    "decoder_vocab_size",
    "decoder_max_position_embeddings",
    "head_dim",
    "attention_dropout",
    "classifier_dropout",
    "embedding_layer_norm_epsilon",
    "final_layer_norm",
    "decoder_start_token_id",
)
