"""Ensembles: translation models that share one vocabulary, decoding as one model through ``generate``.

    from hf_transformer.ensemble import TransformerEnsemble

    ensemble, tokenizer = TransformerEnsemble.from_folders(["runs/en-de-seed42", "runs/en-de-seed43"])
    batch = tokenizer(["A man is riding a bicycle."], return_tensors="pt", padding=True)
    ensemble.generate(**batch, num_beams=5)

At every decoding step each member scores the next token and the ensemble's score is the log of the members'
mean probability, log (1/K) sum_k p_k(y | x, y_<t), the usual ensemble of neural translation systems. Everything
else is ``generate``'s own: greedy and beam search, length penalty, stopping, the cache's reordering between beams.
`Predictor.from_pretrained([folder, folder, ...])` uses it.

The members must read and write the same tokens: the folders' vocabularies and special token ids are compared when
they are loaded, and a mismatch is an error naming the folder and the field. Each member keeps its own decoding
cache (members may differ in size and shape); :class:`EnsembleCache` carries them through ``generate`` as one cache.
An ensemble is not saved as one folder: it is its members' folders.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from .folders import SEQ2SEQ
from .generation import (
    TransformerGenerationMixin,
    accepts_either_cache_name,
    cache_of,
    output_with_cache,
    precompute_forward_signatures,
)
from .input_checks import check_labels_in_range
from .modeling_transformer import TransformerForConditionalGeneration, TransformerPreTrainedModel
from .saved_folder import read_folder

__all__ = ["EnsembleCache", "TransformerEnsemble"]

# What every member must agree on to decode the same token sequences.
_SHARED_CONFIG_FIELDS = (
    "decoder_vocab_size",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)


class EnsembleCache(EncoderDecoderCache):
    """The first member's decoding cache, carrying the other members' caches.

    ``generate`` reads the decoded length from the first member's layers and reorders, repeats or selects batch
    rows through this object; each of those operations reaches every member's cache."""

    def __init__(self, first: EncoderDecoderCache, others: Sequence[EncoderDecoderCache]):
        super().__init__(first.self_attention_cache, first.cross_attention_cache)
        self.is_updated = first.is_updated
        self.others = list(others)

    def members(self) -> list[EncoderDecoderCache]:
        """Each member's cache, in the ensemble's member order (the first is this object)."""
        return [self, *self.others]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        for cache in self.others:
            cache.reorder_cache(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        for cache in self.others:
            cache.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        for cache in self.others:
            cache.batch_select_indices(indices)

    def crop(self, max_length: int) -> None:
        super().crop(max_length)
        for cache in self.others:
            cache.crop(max_length)

    def reset(self) -> None:
        super().reset()
        for cache in self.others:
            cache.reset()


class EnsembleEncoder(nn.Module):
    """Every member's encoder over the same source; their outputs side by side on the feature axis,
    (B, S, sum of the members' d_model), so that ``generate`` repeats them for beams as one tensor."""

    def __init__(self, members: Sequence[TransformerForConditionalGeneration]):
        super().__init__()
        self._members = list(members)  # not registered: the ensemble owns them

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, return_dict=None, **kwargs):
        if inputs_embeds is not None:
            raise ValueError("an ensemble encodes token ids (`input_ids`): its members embed them differently")
        states = [
            member.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
            for member in self._members
        ]
        return BaseModelOutput(last_hidden_state=torch.cat(states, dim=-1))


def _warn_of_other_generation_settings(members) -> None:
    """The ensemble decodes with member 0's generation settings (beams, lengths, penalties): where another member
    saved others, a warning names them, so that the order of the folders does not change the translations unseen."""
    first = members[0].generation_config.to_diff_dict()
    for index, member in enumerate(members[1:], start=1):
        theirs = member.generation_config.to_diff_dict()
        differ = sorted(
            name
            for name in set(first) | set(theirs)
            if name != "transformers_version" and first.get(name) != theirs.get(name)
        )
        if differ:
            shown = "; ".join(f"{name} {theirs.get(name)!r} there, {first.get(name)!r} used" for name in differ)
            warnings.warn(
                f"ensemble member {index} saved other generation settings than member 0, whose settings the ensemble "
                f"uses ({shown}): pass them with the call to choose",
                stacklevel=3,
            )


class TransformerEnsemble(TransformerPreTrainedModel, TransformerGenerationMixin):
    """Several :class:`TransformerForConditionalGeneration` over one vocabulary, decoding as one model.

    ``forward`` returns the log of the members' mean next-token probabilities as ``logits`` (already normalised,
    so ``generate``'s own log-softmax leaves them unchanged) and, with ``labels``, the label-smoothed
    cross-entropy of that distribution (the first member's ``label_smoothing``)."""

    def __init__(self, members: Sequence[TransformerForConditionalGeneration]):
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one member model")
        for index, member in enumerate(members):
            if not isinstance(member, TransformerForConditionalGeneration):
                raise TypeError(
                    f"ensemble member {index} is a {type(member).__name__}; members are "
                    "TransformerForConditionalGeneration models"
                )
            for name in _SHARED_CONFIG_FIELDS:
                mine, first = getattr(member.config, name), getattr(members[0].config, name)
                if mine != first:
                    raise ValueError(
                        f"ensemble member {index} has {name}={mine} but member 0 has {name}={first}: members must "
                        "share one vocabulary and its special tokens"
                    )
        kinds = [(member.dtype, member.device) for member in members]
        for index, kind in enumerate(kinds):
            if kind != kinds[0]:
                raise ValueError(
                    f"ensemble member {index} computes in {kind[0]} on {kind[1]}, member 0 in {kinds[0][0]} on "
                    f"{kinds[0][1]}: give members of one dtype on one device (model.to(dtype=..., device=...))"
                )
        super().__init__(copy.deepcopy(members[0].config))
        # generate caps its length at the decoder position table (TransformerGenerationMixin), and the Predictor and
        # the pipeline cut a text at the encoder's: the shortest member's of each.
        self.config.decoder_max_position_embeddings = min(m.config.decoder_max_position_embeddings for m in members)
        self.config.max_position_embeddings = min(m.config.max_position_embeddings for m in members)
        self.members = nn.ModuleList(members)
        self.generation_config = copy.deepcopy(members[0].generation_config)
        _warn_of_other_generation_settings(members)
        self.d_models = [member.config.d_model for member in members]

    @classmethod
    def from_folders(cls, folders: Sequence[str | Path], **load_options) -> tuple[TransformerEnsemble, object]:
        """Load each saved seq2seq folder (``from_pretrained`` with ``load_options``; an adapter folder merged into
        its base model) and the first folder's tokenizer; every folder's tokenizer must have the same vocabulary."""
        if isinstance(folders, (str, os.PathLike)):  # one folder's name would be read as folders of its characters
            raise TypeError(f"from_folders takes a list of model folders, not one folder: [{str(folders)!r}]")
        folders = [read_folder(folder) for folder in folders]
        if not folders:
            raise ValueError("an ensemble needs at least one model folder")
        for folder in folders:  # a masked-token folder would load as a member with a decoder of random weights
            folder.check("an ensemble", (SEQ2SEQ,), tokenizer=True)
        tokenizer = folders[0].load_tokenizer()
        vocabulary = tokenizer.get_vocab()
        for folder in folders[1:]:
            other = folder.load_tokenizer().get_vocab()
            if other != vocabulary:
                differing = sorted(set(other.items()) ^ set(vocabulary.items()))
                raise ValueError(
                    f"the tokenizer of {folder.path} differs from that of {folders[0].path} ({len(differing)} (token, "
                    f"id) pairs differ, e.g. {differing[:3]}): an ensemble's members must share one vocabulary; train "
                    "them with one tokenizer (train_translation.py --tokenizer FOLDER)"
                )
        members = [folder.load_model(**load_options) for folder in folders]
        return cls(members).eval(), tokenizer

    def get_encoder(self, modality: str | None = None) -> EnsembleEncoder:
        return EnsembleEncoder(self.members)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.members[0].get_input_embeddings()

    def get_output_embeddings(self):
        return None  # the members project to the vocabulary themselves; nothing to tie here

    def _init_weights(self, module: nn.Module) -> None:
        pass  # the members come trained; nothing of the ensemble's own is initialised

    def save_pretrained(self, *args, **kwargs):
        raise NotImplementedError(
            "an ensemble is its members' folders: save each member (ensemble.members[i].save_pretrained) and load "
            "them again with TransformerEnsemble.from_folders"
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return self.members[0].prepare_decoder_input_ids_from_labels(labels)

    @accepts_either_cache_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        """As :meth:`TransformerForConditionalGeneration.forward` for the arguments ``generate`` and
        ``Seq2SeqTrainer`` pass; ``encoder_outputs`` are the members' encoder states side by side
        (:class:`EnsembleEncoder`)."""
        unsupported = sorted(name for name, value in kwargs.items() if value not in (None, False))
        unsupported = [name for name in unsupported if name not in ("cache_position", "num_items_in_batch")]
        if unsupported:
            raise ValueError(f"an ensemble does not take {', '.join(unsupported)}")
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        if attention_mask is None and input_ids is not None:
            # What a member's forward derives (its padding masked), so that the members' cross-attention, given the
            # encoder states below, masks it too.
            attention_mask = input_ids.ne(self.config.pad_token_id)
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        encoder_states = encoder_outputs[0]  # (B, S, sum of d_model)
        if encoder_states.shape[-1] != sum(self.d_models):
            raise ValueError(
                f"encoder_outputs have {encoder_states.shape[-1]} features; this ensemble's encoders give "
                f"{sum(self.d_models)} ({' + '.join(map(str, self.d_models))})"
            )
        member_caches = self._member_caches(cache) if cache is not None else [None] * len(self.members)

        log_probs, returned_caches = [], []
        for member, states, member_cache in zip(
            self.members, encoder_states.split(self.d_models, dim=-1), member_caches
        ):
            output = member(
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask,
                encoder_outputs=(states,),
                cache=member_cache,  # the name members take without a warning on every release
                use_cache=use_cache,
                return_dict=True,
            )
            log_probs.append(F.log_softmax(output.logits.float(), dim=-1))  # (B, T, V)
            returned_caches.append(cache_of(output))
        # log of the mean probability, computed in log space: (B, T, V)
        logits = torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(self.members))

        loss = None
        if labels is not None:
            check_labels_in_range(labels, logits.shape[-1])
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                labels.reshape(-1).to(logits.device),
                ignore_index=-100,
                label_smoothing=self.config.label_smoothing,
            )
        ensemble_cache = None
        if use_cache is not False and all(isinstance(c, EncoderDecoderCache) for c in returned_caches):
            # The first member hands back the cache it was given: the ensemble's own from the first step of
            # generate on; a forward without a cache gets one made of the members' new caches.
            first, *others = returned_caches
            ensemble_cache = first if isinstance(first, EnsembleCache) else EnsembleCache(first, others)
        output = output_with_cache(
            Seq2SeqLMOutput, ensemble_cache, loss=loss, logits=logits, encoder_last_hidden_state=encoder_states
        )
        return output if return_dict is not False else output.to_tuple()

    def _member_caches(self, past: EncoderDecoderCache) -> list[EncoderDecoderCache]:
        """The members' caches inside ``past``: an :class:`EnsembleCache`, or (the first step of ``generate``) the
        empty cache it built for the first member, to which empty caches of the same kind are added for the others."""
        if isinstance(past, EnsembleCache):
            if len(past.others) != len(self.members) - 1:
                raise ValueError(
                    f"the cache holds {len(past.others) + 1} members' caches, the ensemble has {len(self.members)}"
                )
            return past.members()
        if not isinstance(past, EncoderDecoderCache) or type(past.self_attention_cache) is not DynamicCache:
            raise ValueError(
                f"an ensemble decodes over dynamic caches (the default of generate); got {type(past).__name__} "
                f"of {type(getattr(past, 'self_attention_cache', None)).__name__}"
            )
        if past.get_seq_length() > 0:
            raise ValueError("an ensemble starts from an empty cache; this one already holds decoded positions")
        others = [
            EncoderDecoderCache(DynamicCache(config=member.config), DynamicCache(config=member.config))
            for member in self.members[1:]
        ]
        return [EnsembleCache(past, others), *others]

    def _reorder_cache(self, past_key_values, beam_idx: torch.LongTensor):
        # Each member's cache as the single model reorders it (cross-attention rows only where they change). The
        # first member's caches are this object's own self- and cross-attention caches, which the single model's
        # reordering reaches one by one, leaving the other members' to the loop.
        super()._reorder_cache(past_key_values, beam_idx)
        for cache in getattr(past_key_values, "others", ()):
            super()._reorder_cache(cache, beam_idx)
        return past_key_values


precompute_forward_signatures(TransformerEnsemble)
