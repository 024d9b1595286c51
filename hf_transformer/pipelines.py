"""`transformers.pipeline("hf-transformer-translation", model=folder)`: translation as a transformers pipeline.

transformers 5 removed its `translation` and `text2text-generation` tasks and refuses those names before looking at
registered pipelines, so the task has a name of its own; `import hf_transformer` registers it. A saved translation
folder names the pipeline in its config (`custom_pipelines`) and carries this file (and `folders.py`, which it
imports), so that `pipeline("hf-transformer-translation", model=folder, trust_remote_code=True)` runs where this
package is not installed. This module therefore imports nothing of the package but `folders` (and, when registering,
the saving of a folder's extra files, `checkpoint`).
"""

from __future__ import annotations

import warnings

from transformers import AutoModelForSeq2SeqLM, Pipeline

from .folders import SEQ2SEQ, check_task

PIPELINE_TASK = "hf-transformer-translation"

__all__ = [
    "PIPELINE_TASK",
    "TranslationPipeline",
    "generated_ids",
    "generation_length",
    "input_length_limit",
    "register_pipeline",
]


def input_length_limit(config, tokenizer) -> int:
    """The longest input in tokens: the smaller of the encoder's position table and the tokenizer's
    `model_max_length` (a tokenizer trained by hand may keep a default longer than the model's table)."""
    limits = [config.max_position_embeddings, getattr(tokenizer, "model_max_length", None)]
    return min(limit for limit in limits if isinstance(limit, int) and limit > 0)


def generated_ids(output):
    """The token ids `generate` returned: the ids themselves, or the ``sequences`` of the `ModelOutput` it returns
    where ``return_dict_in_generate`` is set (in the call or in the folder's generation config), as transformers'
    text-generation pipeline reads them."""
    return output.sequences if hasattr(output, "sequences") else output


def generation_length(
    config, generation_config, max_new_tokens: int | None, max_length: int | None = None, *, warn: bool = False
) -> int:
    """`max_new_tokens`, else `max_length` (which counts the start token), else the folder's generation config,
    else the decoder's position table; never more than the table holds. With ``warn``, a `max_new_tokens` or
    `max_length` given past the table is lowered with a warning, as `model.generate` lowers it."""
    table = config.decoder_max_position_embeddings or config.max_position_embeddings
    saved = generation_config.to_diff_dict()
    for name, given, least in (("max_new_tokens", max_new_tokens, 1), ("max_length", max_length, 2)):
        if given is not None and (isinstance(given, bool) or not (isinstance(given, int) and given >= least)):
            raise ValueError(f"`{name}` must be an integer of at least {least}, got {given!r}")
    if max_new_tokens is not None:
        wanted = max_new_tokens
    elif max_length is not None:
        wanted = max_length - 1
    elif saved.get("max_new_tokens"):
        wanted = saved["max_new_tokens"]
    elif saved.get("max_length"):
        wanted = saved["max_length"] - 1  # an encoder-decoder's max_length counts the start token
    else:
        wanted = table
    if warn and wanted > table and (max_new_tokens is not None or max_length is not None):
        setting, asked = (
            ("max_new_tokens", max_new_tokens) if max_new_tokens is not None else ("max_length", max_length)
        )
        warnings.warn(
            f"`{setting}`={asked} goes past the decoder's position table of {table} positions "
            f"(decoder_max_position_embeddings): generating {table} new tokens at most, the most it holds.",
            UserWarning,
            stacklevel=3,
        )
    return max(1, min(wanted, table))


class TranslationPipeline(Pipeline):
    """`transformers.pipeline("hf-transformer-translation", model=folder)`: answers as transformers 4's translation
    pipeline did. A text gives `[{"translation_text": ...}]` (one dict per `num_return_sequences`), a list of texts a
    list of those, flattened to one dict per text when each has one; `return_tensors=True` gives
    `translation_token_ids` instead of the text, `clean_up_tokenization_spaces` goes to the decoding, and the other
    options to `generate`."""

    def __init__(self, model, *args, **kwargs):
        # A folder of another saved class loads as a seq2seq model with weights it does not hold (a masked-token
        # folder's decoder would be random): refused in one line before anything runs.
        config = model.config
        name = model.name_or_path or type(model).__name__
        entry = f'pipeline("{PIPELINE_TASK}")'
        check_task(config.architectures, name, entry, (SEQ2SEQ,), is_encoder_decoder=config.is_encoder_decoder)
        super().__init__(model, *args, **kwargs)

    def _sanitize_parameters(
        self, truncation=True, return_tensors=None, clean_up_tokenization_spaces=None, **generate_kwargs
    ):
        postprocess_params = {"return_tensors": bool(return_tensors)}
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return {"truncation": truncation}, generate_kwargs, postprocess_params

    def __call__(self, texts, *args, **kwargs):
        if isinstance(texts, list) and not texts:
            return []  # transformers' Pipeline fails on an empty list with an IndexError
        results = super().__call__(texts, *args, **kwargs)
        if (
            isinstance(texts, list)
            and all(isinstance(text, str) for text in texts)
            and all(len(r) == 1 for r in results)
        ):
            return [result[0] for result in results]
        return results

    def preprocess(self, text: str, truncation: bool = True):
        if not isinstance(text, str):
            raise TypeError(f"{PIPELINE_TASK} takes text (a string, or a list of strings), got {type(text).__name__}")
        batch = self.tokenizer(
            [text],
            return_tensors="pt",
            truncation=truncation,
            max_length=input_length_limit(self.model.config, self.tokenizer) if truncation else None,
        )
        batch.pop("token_type_ids", None)
        return batch

    def _forward(self, model_inputs, **generate_kwargs):
        length = generation_length(
            self.model.config,
            self.model.generation_config,
            generate_kwargs.pop("max_new_tokens", None),
            generate_kwargs.pop("max_length", None),
            warn=True,
        )
        # As Predictor: the limit goes in the field the saved generation config uses (the training scripts save
        # max_length); setting the other one as well makes generate() warn at every call that both are set.
        if self.model.generation_config.to_diff_dict().get("max_new_tokens"):
            generate_kwargs["max_new_tokens"] = length
        else:
            generate_kwargs["max_length"] = length + 1  # counts the start token
        output_ids = generated_ids(self.model.generate(**model_inputs, **generate_kwargs))  # (B * sequences, L)
        # (B, sequences per text, L): the pipeline hands each text its own row of a batch (`batch_size` > 1), so the
        # `num_return_sequences` sequences of one text must be one row, not consecutive rows.
        texts = model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(texts, -1, *output_ids.shape[1:])}

    def postprocess(self, model_outputs, return_tensors: bool = False, **decode_options):
        output_ids = model_outputs["output_ids"][0]  # one text's (sequences, L)
        if return_tensors:
            return [{"translation_token_ids": ids} for ids in output_ids]
        texts = self.tokenizer.batch_decode(output_ids, skip_special_tokens=True, **decode_options)
        return [{"translation_text": text.strip()} for text in texts]


def register_pipeline() -> None:
    from transformers.pipelines import PIPELINE_REGISTRY

    PIPELINE_REGISTRY.register_pipeline(
        PIPELINE_TASK, pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
    )
    # A saved seq2seq folder names the pipeline (`custom_pipelines`) and carries this file, so that
    # `pipeline(PIPELINE_TASK, model=folder, trust_remote_code=True)` runs where this package is not installed.
    from .checkpoint import register_folder_pipeline

    register_folder_pipeline("TransformerForConditionalGeneration", TranslationPipeline)
