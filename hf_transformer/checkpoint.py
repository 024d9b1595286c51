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

Saving writes a folder's extra files: the model's code (every head named in ``auto_map``) and, for a class that has a
pipeline (:func:`register_folder_pipeline`), the pipeline's code, named in the config's ``custom_pipelines``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from transformers.dynamic_module_utils import custom_object_save

from .configuration_transformer import _FOLDER_PIPELINES

logger = logging.getLogger(__name__)


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


def refuse_quantized_modules(model) -> None:
    """Raises ``ValueError`` before anything is written when ``torch.ao.quantization.quantize_dynamic`` has replaced
    layers of ``model``: their packed int8 weights are not tensors safetensors can write (transformers would stop
    inside the writer, after the config is saved)."""
    quantized = [name for name, module in model.named_modules() if type(module).__module__.startswith("torch.ao.nn.q")]
    if quantized:
        raise ValueError(
            f"save_pretrained cannot write this model: its layers (`{quantized[0]}` and others) were quantized by "
            "torch.ao.quantization.quantize_dynamic, whose packed int8 weights safetensors cannot store. "
            "Save the float model and quantize after loading it, or export int8 weights for an inference engine "
            '(hf_transformer.export.to_ctranslate2(folder, output, quantization="int8"), or to_onnx(folder, output, '
            'quantization="int8")).'
        )


# The settings a model's modules are built from (their sizes, layout and arithmetic): changed in the config after the
# model is built, they change nothing in the model, and the folder it saves would load as another model (or not load).
# The vocabulary sizes are left out: `resize_token_embeddings` changes the model and its config together.
BUILT_SETTINGS = (
    "d_model", "encoder_layers", "decoder_layers", "num_attention_heads", "head_dim", "intermediate_size",
    "max_position_embeddings", "decoder_max_position_embeddings", "position_embedding_type", "layer_norm_position",
    "activation_function", "scale_embedding", "layer_norm_epsilon", "embedding_layer_norm",
    "embedding_layer_norm_epsilon", "final_layer_norm", "share_embeddings", "classifier_pooling", "num_labels",
)  # fmt: skip


def built_settings(config) -> dict:
    return {name: getattr(config, name, None) for name in BUILT_SETTINGS}


def refuse_changed_settings(model) -> None:
    """Raises ``ValueError`` before anything is written when the config now holds other `BUILT_SETTINGS` than the
    model was built with, naming each."""
    built = getattr(model, "_built_settings", None)
    if built is None:
        return
    now = built_settings(model.config)
    changed = [
        f"{name} {built[name]!r} when built, {now[name]!r} now" for name in BUILT_SETTINGS if now[name] != built[name]
    ]
    if changed:
        raise ValueError(
            f"save_pretrained: the config was changed after the model was built ({'; '.join(changed)}): the model "
            "still computes as it was built, and the folder would load as another model. Build a new model from the "
            "changed config (and load the weights into it) instead."
        )


def refuse_unsavable_generation_config(model) -> None:
    """Raises before anything is written where transformers would refuse the generation config (a setting it checks
    strictly when changed) after writing ``config.json``, leaving a folder whose config no longer matches its
    weights: the generation config is saved to a scratch folder first."""
    import tempfile

    generation_config = getattr(model, "generation_config", None)
    if generation_config is None or not model.can_generate():
        return
    with tempfile.TemporaryDirectory() as scratch:
        generation_config.save_pretrained(scratch)


def _weight_files(folder) -> dict[str, tuple[int, int]]:
    """The safetensors files of ``folder``: name -> (inode, modification time)."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in folder.glob("*.safetensors")}


def _weights_take_the_umask(folder, before: dict[str, tuple[int, int]]) -> None:
    """Gives the safetensors files just written into ``folder`` the permissions of a file the process creates
    (``0o666`` less the umask), as every other file of the folder has: safetensors 0.8 writes them ``0o600`` whatever
    the umask (huggingface/safetensors#782), so another user could not read a folder shared on one machine."""
    written = {name: key for name, key in _weight_files(folder).items() if before.get(name) != key}
    if not written:
        return
    umask = os.umask(0)  # reading the umask sets it: it is put back at once
    os.umask(umask)
    for name in written:
        try:
            (Path(folder) / name).chmod(0o666 & ~umask)
        except PermissionError:  # another user's file, written over in place, keeps the owner's choice
            pass


def register_folder_pipeline(architecture: str, pipeline_class: type) -> None:
    """Folders saved by the class named ``architecture`` name ``pipeline_class`` (registered first with
    ``transformers.pipelines.PIPELINE_REGISTRY``) in their ``custom_pipelines``, as ``Pipeline.save_pretrained`` does,
    and carry its module (and the modules it imports) beside the model's code, so that ``transformers.pipeline(task,
    model=folder, trust_remote_code=True)`` runs it where this package is not installed. Where it is installed, the
    package's registered pipeline serves the task and the configuration leaves the entry unread (no
    trust_remote_code needed)."""
    if not getattr(pipeline_class, "_registered_impl", None):
        raise ValueError(f"{pipeline_class.__name__} is not registered with transformers' PIPELINE_REGISTRY")
    _FOLDER_PIPELINES[architecture] = pipeline_class


def pipeline_entries(pipelines) -> dict[str, dict]:
    """The ``custom_pipelines`` entries of ``pipelines`` as ``Pipeline.save_pretrained`` writes them: task ->
    ``impl`` (``module.Class`` in the copied code), ``pt`` (Auto class names) and the registration's other settings,
    from ``Pipeline._registered_impl``, which ``PIPELINE_REGISTRY.register_pipeline`` sets (a private attribute of
    transformers, pinned in tests/test_private_hooks.py)."""
    entries = {}
    for pipeline in pipelines:
        for task, info in pipeline._registered_impl.items():
            impl = f"{pipeline.__module__.rsplit('.', 1)[-1]}.{pipeline.__name__}"
            entries[task] = {**info, "impl": impl, "pt": [auto.__name__ for auto in info["pt"]]}
    return entries


class CheckedLoadingMixin:
    """What the package changes in ``PreTrainedModel``'s loading and saving. The transformers hooks overridden here
    (checked against transformers 5.23.0; ``tests/test_private_hooks.py`` pins each):
    ``from_pretrained`` (public, wrapped by :func:`checked_from_pretrained`), ``get_expanded_tied_weights_keys``,
    ``mark_tied_weights_as_initialized``, ``save_pretrained`` (public) with ``should_save_on_this_rank`` and
    ``dynamic_module_utils.custom_object_save``. ``save_pretrained`` also gives the weight files it writes the
    permissions of the folder's other files (the umask's; safetensors 0.8 writes them 0600), and a folder of a class
    that has a pipeline its pipeline (:func:`register_folder_pipeline`). ``post_init`` (public) records the settings
    the modules are built from, and ``save_pretrained`` refuses, before writing anything, a config changed since in
    one of them (:func:`refuse_changed_settings`) or a generation config transformers would refuse after writing
    ``config.json`` (:func:`refuse_unsavable_generation_config`)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        # transformers only logs weights that are missing from, or unused in, a checkpoint; a model loaded
        # here must never be left with random weights, so those reports become errors (above).
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

    def post_init(self):
        super().post_init()
        self._built_settings = built_settings(self.config)

    def save_pretrained(self, save_directory, *args, **kwargs):
        refuse_quantized_modules(self)
        refuse_changed_settings(self)
        refuse_unsavable_generation_config(self)
        before = _weight_files(save_directory)
        with self._naming_its_pipelines(save_directory, *args, **kwargs):
            result = self._save_with_every_head(save_directory, *args, **kwargs)
        _weights_take_the_umask(save_directory, before)
        return result

    @contextlib.contextmanager
    def _naming_its_pipelines(self, save_directory, *args, **kwargs) -> Iterator[None]:
        # A folder that carries the model's code (remote code) also carries the pipelines of its class; the config in
        # memory names them while it is saved and is left as it was.
        pipeline = _FOLDER_PIPELINES.get(self._package_class().__name__)
        if pipeline is None and self.is_remote_code() and self.config.__dict__.get("custom_pipelines"):
            with self._keeping_loaded_pipelines(save_directory, *args, **kwargs):
                yield
            return
        if pipeline is None or not self.is_remote_code():
            yield
            return
        is_main_process = args[0] if args else kwargs.get("is_main_process", True)
        if self.should_save_on_this_rank(is_main_process):
            os.makedirs(save_directory, exist_ok=True)
            custom_object_save(object.__new__(pipeline), save_directory)  # its file and those it imports
        config = self.config
        before = config.__dict__.get("custom_pipelines")
        config.custom_pipelines = {**(before or {}), **pipeline_entries([pipeline])}
        try:
            yield
        finally:
            if before is None:
                del config.custom_pipelines
            else:
                config.custom_pipelines = before

    @contextlib.contextmanager
    def _keeping_loaded_pipelines(self, save_directory, *args, **kwargs) -> Iterator[None]:
        # Loaded through remote code (the package not installed, so no pipeline registered): the config still names
        # the folder's pipelines. Their files, and the files they import, are copied from the folder the model was
        # read from; an entry whose file is not found there is left out of the saved config, with a warning, rather
        # than naming a file the new folder lacks.
        from transformers.dynamic_module_utils import get_relative_import_files

        config = self.config
        before = config.custom_pipelines
        source = Path(str(self.name_or_path or ""))
        kept, files = {}, set()
        for task, entry in before.items():
            module = str(entry.get("impl", "")).rsplit(".", 1)[0]
            found = source / f"{module}.py"
            if module and found.is_file():
                kept[task] = entry
                files |= {found, *map(Path, get_relative_import_files(str(found)))}
            else:
                logger.warning(
                    "%s: pipeline %r left out of the saved config: %s not found", save_directory, task, found
                )
        is_main_process = args[0] if args else kwargs.get("is_main_process", True)
        if files and self.should_save_on_this_rank(is_main_process):
            os.makedirs(save_directory, exist_ok=True)
            for path in files:
                if path.resolve() != (Path(save_directory) / path.name).resolve():
                    shutil.copyfile(path, Path(save_directory) / path.name)
        config.custom_pipelines = kept
        try:
            yield
        finally:
            config.custom_pipelines = before

    def _save_with_every_head(self, save_directory, *args, **kwargs):
        # `register_for_auto_class` maps only the class being saved in `auto_map`; naming every head lets each Auto
        # class load the folder through the copied code (trust_remote_code) where this package is not installed.
        if not self.is_remote_code():
            return super().save_pretrained(save_directory, *args, **kwargs)
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self.remote_code_auto_map()}
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
        """The first class of the model's module in `cls`'s hierarchy (`cls` itself unless a wrapper subclassed it)."""
        base = next(klass for klass in cls.__mro__ if CheckedLoadingMixin in klass.__bases__)
        return next(klass for klass in cls.__mro__ if klass.__module__ == base.__module__)

    @classmethod
    def remote_code_auto_map(cls) -> dict[str, str]:
        """``auto_map`` of a saved folder: Auto class -> ``module.Class`` in the copied code files."""
        raise NotImplementedError
