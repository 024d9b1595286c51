"""The private hooks of transformers that the package overrides or calls. Each must still exist, with the
arguments the override expects, and still be used where the package relies on it: an upgrade that removes or
renames one fails here, naming it, instead of silently changing what users get."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, PreTrainedModel, Trainer
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_transformer import TransformerConfig, TransformerForConditionalGeneration, TransformerPreTrainedModel
from hf_transformer.checkpoint import CheckedLoadingMixin
from hf_transformer.generation import TransformerGenerationMixin
from hf_transformer.speed import AttentionKernels
from hf_transformer.trainer import LengthGroupedTrainer, _PassOrderMixin

# (owner, name, parameters the override is written for, where transformers calls it)
HOOKS = [
    (GenerationMixin, "_reorder_cache", None, (GenerationMixin, "_beam_search", "self._reorder_cache(")),
    (GenerationMixin, "_valid_auto_compile_criteria", ["self", "model_kwargs", "generation_config"], None),
    (
        GenerationMixin,
        "create_masks_for_generate",
        None,
        (GenerationMixin, "prepare_inputs_for_generation", 'getattr(self, "create_masks_for_generate"'),
    ),
    (
        GenerationMixin,
        "prepare_inputs_for_generation",
        ["self", "input_ids", "next_sequence_length"],
        (GenerationMixin, "_prefill", "is_first_iteration=is_first_iteration"),
    ),
    (PreTrainedModel, "get_expanded_tied_weights_keys", ["self", "all_submodels"], None),
    (
        PreTrainedModel,
        "mark_tied_weights_as_initialized",
        ["self", "loading_info"],
        (PreTrainedModel, "_finalize_model_loading", "model.mark_tied_weights_as_initialized(loading_info)"),
    ),
    (PreTrainedModel, "_init_weights", ["self", "module"], None),
    # The training order of the package's Trainer (hf_transformer.trainer).
    (
        Trainer,
        "_get_train_sampler",
        ["self", "train_dataset"],
        (Trainer, "get_train_dataloader", "sampler_fn=self._get_train_sampler"),
    ),
    (
        Trainer,
        "_get_eval_sampler",
        ["self", "eval_dataset"],
        (Trainer, "get_eval_dataloader", "sampler_fn=self._get_eval_sampler"),
    ),
    # The package's checkpoint files, written before transformers' own (hf_transformer.trainer._PassOrderMixin).
    (
        Trainer,
        "_save_checkpoint",
        ["self", "model", "trial"],
        (Trainer, "_maybe_log_save_evaluate", "self._save_checkpoint(model, trial)"),
    ),
    (
        PreTrainedModel,
        "_can_set_attn_implementation",
        [],
        (PreTrainedModel, "set_attn_implementation", "self._can_set_attn_implementation()"),
    ),
]


@pytest.mark.parametrize(("owner", "name", "parameters", "caller"), HOOKS, ids=[hook[1] for hook in HOOKS])
def test_overridden_transformers_hook_still_exists(owner, name, parameters, caller):
    if name in ("_reorder_cache", "create_masks_for_generate"):
        # Looked up on the model by generate, which calls the model's own when it has one.
        assert name in TransformerGenerationMixin.__dict__ and issubclass(
            TransformerForConditionalGeneration, TransformerGenerationMixin
        )
    else:
        assert hasattr(owner, name), f"transformers no longer has {owner.__name__}.{name}"
        if parameters is not None:
            got = list(inspect.signature(getattr(owner, name)).parameters)
            assert got[: len(parameters)] == parameters, f"{owner.__name__}.{name} now takes {got}"
    if caller is not None:
        caller_owner, caller_name, call = caller
        source = inspect.getsource(getattr(caller_owner, caller_name))
        assert call in source, f"{caller_owner.__name__}.{caller_name} no longer calls `{call}`"


def test_overrides_are_defined_where_expected():
    assert "_init_weights" in TransformerPreTrainedModel.__dict__
    assert "_can_set_attn_implementation" in AttentionKernels.__dict__
    assert "_get_train_sampler" in LengthGroupedTrainer.__dict__
    assert "_get_eval_sampler" in LengthGroupedTrainer.__dict__
    assert "_save_checkpoint" in _PassOrderMixin.__dict__ and issubclass(LengthGroupedTrainer, _PassOrderMixin)
    # It writes into the folder transformers saves the checkpoint in, before the trainer state that makes it one.
    source = inspect.getsource(Trainer._save_checkpoint)
    assert 'checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"' in source
    assert "run_dir = self._get_output_dir(trial=trial)" in source
    assert "output_dir = os.path.join(run_dir, checkpoint_folder)" in source
    assert list(inspect.signature(Trainer._get_output_dir).parameters) == ["self", "trial"]
    assert 0 < source.index("self.save_model(output_dir") < source.index("save_to_json(os.path.join(output_dir, TRA")
    mro = TransformerPreTrainedModel.__mro__
    assert mro.index(AttentionKernels) < mro.index(PreTrainedModel)  # its answer, not transformers' guess
    for name in ("get_expanded_tied_weights_keys", "mark_tied_weights_as_initialized", "save_pretrained"):
        assert name in CheckedLoadingMixin.__dict__, name
    assert issubclass(TransformerPreTrainedModel, CheckedLoadingMixin)
    for name in (
        "_reorder_cache",
        "_valid_auto_compile_criteria",
        "create_masks_for_generate",
        "prepare_inputs_for_generation",
        "generate",
    ):
        assert name in TransformerGenerationMixin.__dict__, name
    assert TransformerForConditionalGeneration.generate is TransformerGenerationMixin.generate


def test_other_private_names_the_package_reads():
    assert callable(GenerationConfig._get_default_generation_params)  # the config's generation-key warning
    assert isinstance(GenerationConfig._get_default_generation_params(), dict)
    assert hasattr(EncoderDecoderCache, "get_mask_sizes")
    assert hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    # The version counter tells the cross-attention reordering check that a cached tensor was edited in place.
    counted = torch.zeros(2)
    before = counted._version
    counted.add_(1.0)
    assert isinstance(before, int) and counted._version > before
    # Read by the attention layers, the FSDP-safe save and the remote-code copy.
    assert "is_updated" in EncoderDecoderCache(DynamicCache(), DynamicCache()).__dict__
    assert list(inspect.signature(PreTrainedModel.should_save_on_this_rank).parameters)[:2] == [
        "self",
        "is_main_process",
    ]
    # The fused output loss gives way to hooks on the output layer (hf_transformer.speed._calls_hooks): torch's
    # tables of a module's hooks and of the global ones.
    from torch.nn.modules import module as torch_module

    layer = torch.nn.Linear(2, 2)
    handle = layer.register_forward_hook(lambda module, inputs, output: output)
    assert len(layer._forward_hooks) == 1 and not layer._forward_pre_hooks
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, inputs: None)
    assert len(torch_module._global_forward_pre_hooks) >= 1 and isinstance(torch_module._global_forward_hooks, dict)
    handle.remove()
    from transformers.dynamic_module_utils import custom_object_save

    assert list(inspect.signature(custom_object_save).parameters)[:2] == ["obj", "folder"]


def test_a_registered_pipeline_keeps_its_registration_on_the_class():
    # `Pipeline._registered_impl`, set by `PIPELINE_REGISTRY.register_pipeline`, is what a saved folder's
    # `custom_pipelines` entry is written from (hf_transformer.checkpoint.pipeline_entries) and what the configuration
    # reads to leave the package's own tasks to the installed pipeline.
    from transformers.pipelines import PIPELINE_REGISTRY

    from hf_transformer.checkpoint import pipeline_entries
    from hf_transformer.pipelines import PIPELINE_TASK, TranslationPipeline

    source = inspect.getsource(type(PIPELINE_REGISTRY).register_pipeline)
    assert "pipeline_class._registered_impl = {task: task_impl}" in source
    registered = TranslationPipeline._registered_impl[PIPELINE_TASK]
    assert registered["impl"] is TranslationPipeline and isinstance(registered["pt"], tuple)
    assert pipeline_entries([TranslationPipeline]) == {
        PIPELINE_TASK: {"impl": "pipelines.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    }


def test_generation_module_lists_each_generation_hook():
    import hf_transformer.generation as generation

    for owner, name, _, _ in HOOKS:
        if owner is GenerationMixin:
            assert f"``GenerationMixin.{name}" in generation.__doc__, name
    assert f"transformers {generation.TRANSFORMERS_VERSION_CHECKED}" in generation.__doc__


def test_a_restarted_prefill_is_told_it_is_the_first_step():
    # prepare_inputs_for_generation cuts a decoder input handed over with an earlier call's cache only at the
    # prefill, which transformers marks with `is_first_iteration` (later steps give `next_sequence_length`).
    assert "is_first_iteration" in inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    assert "next_sequence_length=next_sequence_length" in inspect.getsource(GenerationMixin._prefill)


def test_the_forward_takes_the_cache_under_the_name_generate_hands_it_over():
    # generate hands the decoding cache to the forward as `past_key_values` (transformers 5.23) or `cache` (5.24);
    # a forward that does not take the name in use decodes every step without its cache, so the model takes both
    # and its outputs fill the installed name (hf_transformer.generation.CACHE_NAME).
    from transformers.modeling_outputs import Seq2SeqLMOutput

    from hf_transformer import TransformerForConditionalGeneration, TransformerModel
    from hf_transformer.generation import CACHE_NAME

    prepared = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    handed_over = [name for name in ("cache", "past_key_values") if name in prepared]
    assert handed_over, f"GenerationMixin.prepare_inputs_for_generation now takes {list(prepared)}"
    assert handed_over[0] == CACHE_NAME and CACHE_NAME in Seq2SeqLMOutput.__dataclass_fields__
    for model_class in (TransformerModel, TransformerForConditionalGeneration):
        assert {"cache", "past_key_values"} <= set(inspect.signature(model_class.forward).parameters), model_class


def test_config_hooks_still_exist():
    # TransformerConfig derives a setting again when None is assigned only once `PretrainedConfig.__post_init__` has
    # set `_post_init_done` (before it, the dataclass constructor assigns every field, derived ones still None), and
    # relies on `save_pretrained` calling `validate()` to refuse a config that would not load.
    assert "self._post_init_done = True" in inspect.getsource(PretrainedConfig.__post_init__)
    assert "self.validate()" in inspect.getsource(PretrainedConfig.save_pretrained)
    config = TransformerConfig()
    assert config.__dict__.get("_post_init_done") is True
    assert "_post_init_done" not in config.to_dict()


def test_morpheme_tokenizer_hooks_still_exist():
    # MorphemeTokenizerFast (hf_transformer.tokenization.morphemes) is found by its saved class name through
    # transformers' registry of tokenizer classes, and overrides the classmethod `from_pretrained` calls to build
    # the backend (for a class with its own __init__, transformers' version keeps only the vocabulary).
    from transformers.models.auto import tokenization_auto
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    from hf_transformer.tokenization.morphemes import MorphemeTokenizerFast

    assert tokenization_auto.REGISTERED_TOKENIZER_CLASSES["MorphemeTokenizerFast"] is MorphemeTokenizerFast
    assert "REGISTERED_TOKENIZER_CLASSES" in inspect.getsource(tokenization_auto.tokenizer_class_from_name)
    assert ["cls", "trust_remote_code"] == list(
        inspect.signature(TokenizersBackend.convert_to_native_format.__func__).parameters
    )[:2]
    assert "cls.convert_to_native_format(**init_kwargs)" in inspect.getsource(PreTrainedTokenizerBase._from_pretrained)
    # python-mecab-ko's lattice, which gives each morpheme's span without building its feature objects.
    mecab = pytest.importorskip("mecab")
    from mecab.mecab import create_lattice

    lattice = create_lattice("영화였던가")
    assert mecab.MeCab()._tagger.parse(lattice)
    assert [tuple(span) for span, _node in lattice] == [(0, 2), (2, 3), (3, 5)]


def test_output_capture_hooks_still_exist():
    # The encoder and decoder stacks declare what transformers records of them (`_can_record_outputs`), which
    # `capture_outputs` reads through the registry `PreTrainedModel.__init__` fills; both live in
    # transformers.utils.output_capturing, which transformers does not export at its top. A stack draws no weights of
    # its own (`init_weights`, called by `post_init`): the model holding it does, in its order.
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY, OutputRecorder, capture_outputs

    from hf_transformer.modeling_transformer import TransformerDecoder, TransformerEncoder

    assert callable(capture_outputs) and "layer_name" in OutputRecorder.__dataclass_fields__
    assert "_CAN_RECORD_REGISTRY[self] = self._can_record_outputs" in inspect.getsource(PreTrainedModel.__init__)
    assert "self.init_weights()" in inspect.getsource(PreTrainedModel.post_init)
    model = TransformerForConditionalGeneration(TransformerConfig(vocab_size=40, d_model=16, num_attention_heads=2))
    for stack, stack_class in ((model.model.encoder, TransformerEncoder), (model.model.decoder, TransformerDecoder)):
        assert _CAN_RECORD_REGISTRY.get(stack) == stack_class._can_record_outputs
    # A config class without an `__init__` of its own is given one that takes any keyword, which `@strict` keeps.
    assert "wrap_init_to_accept_kwargs" in inspect.getsource(PretrainedConfig.__init_subclass__)
