"""LoRA adapters through peft, as a user fine-tunes a saved folder: every projection can take an adapter, the adapted
model computes what the merged weights compute (in `generate` too, where the CPU decoding path multiplies by
packed copies of the base weights), only the adapters and the classifier learn, and the adapter folder loads back
through peft's Auto classes."""

from __future__ import annotations

import copy

import peft
import pytest
import torch
from conftest import batch_with_padding, record_calls, tiny_config
from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification, speed

LoraLinear = peft.tuners.lora.Linear  # the layer peft puts in place of each adapted nn.Linear
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"]


def lora(model, task_type, **settings):
    # init_lora_weights=False: both adapter matrices random, so that an adapter that is skipped changes the output.
    settings = dict(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False) | settings
    return peft.get_peft_model(model, peft.LoraConfig(task_type=task_type, **settings))


def adapted_layers(model) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, LoraLinear)}


def test_all_linear_adapts_every_projection_of_both_stacks_and_leaves_the_tied_output_projection_alone():
    model = lora(TransformerForConditionalGeneration(tiny_config()), "SEQ_2_SEQ_LM")
    assert adapted_layers(model) == set(PROJECTIONS)
    adapted = [name for name, module in model.named_modules() if isinstance(module, LoraLinear)]
    # n_layer 2: each encoder layer has 4 attention projections + 2 feed-forward layers, each decoder layer 8 + 2.
    assert sum(".encoder." in name for name in adapted) == 2 * 6
    assert sum(".decoder." in name for name in adapted) == 2 * 10
    assert not any("lm_head" in name for name in adapted)


def test_an_adapted_model_computes_what_its_merged_weights_compute_and_differs_from_the_base():
    torch.manual_seed(0)
    base = TransformerForConditionalGeneration(tiny_config()).eval()
    adapted = lora(copy.deepcopy(base), "SEQ_2_SEQ_LM").eval()
    merged = copy.deepcopy(adapted).merge_and_unload().eval()
    source, target = batch_with_padding()
    inputs = dict(input_ids=source, attention_mask=source.ne(0), decoder_input_ids=target)
    with torch.no_grad():
        logits = adapted(**inputs).logits
        torch.testing.assert_close(logits, merged(**inputs).logits, atol=1e-5, rtol=1e-5)
        assert (logits - base(**inputs).logits).abs().max() > 0.1


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_adapters_scores_each_step_as_the_merged_model_does_with_packed_base_weights(
    monkeypatch, num_beams
):
    """`generate` multiplies few-row products by oneDNN-packed copies of exact `nn.Linear` weights: under LoRA that
    is each adapted layer's base layer, and the adapter's own product must still be added to it."""
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT_ELEMENTS", 0)  # pack every weight of the tiny model
    packed_products = record_calls(monkeypatch, speed._PackedLinearForward, "__call__")
    torch.manual_seed(0)
    base = TransformerForConditionalGeneration(tiny_config(init_std=0.1)).eval()
    adapted = lora(base, "SEQ_2_SEQ_LM").eval()
    merged = copy.deepcopy(adapted).merge_and_unload().eval()
    source, _ = batch_with_padding()
    settings = dict(num_beams=num_beams, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    outputs = dict(return_dict_in_generate=True, output_logits=True, output_scores=True)
    out = adapted.generate(input_ids=source, attention_mask=source.ne(0), **settings, **outputs)
    adapted_bases = {id(module.base_layer) for module in adapted.modules() if isinstance(module, LoraLinear)}
    assert {id(forward.linear) for forward in packed_products} & adapted_bases  # the packed path was taken
    if num_beams == 1:
        # The logits of each step, teacher-forced through the merged model on the tokens greedy search chose.
        with torch.no_grad():
            expected = merged(
                input_ids=source, attention_mask=source.ne(0), decoder_input_ids=out.sequences[:, :-1]
            ).logits
        torch.testing.assert_close(torch.stack(out.logits, dim=1), expected, atol=1e-4, rtol=1e-4)
    else:
        # Beam search keeps the same beams with the same scores as the merged model's (scores to rounding).
        expected = merged.generate(input_ids=source, attention_mask=source.ne(0), **settings, **outputs)
        assert torch.equal(out.sequences, expected.sequences)
        torch.testing.assert_close(out.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)


def test_training_an_adapted_model_moves_only_the_adapters_and_the_adapter_folder_loads_back(tmp_path):
    torch.manual_seed(0)
    TransformerForConditionalGeneration(tiny_config()).save_pretrained(tmp_path / "base")
    base = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    base.activation_checkpointing_enable()
    base.enable_input_require_grads()  # what peft asks for with checkpointing: the embeddings' output needs grad
    adapted = lora(base, "SEQ_2_SEQ_LM", init_lora_weights=True).train()
    before = {name: p.detach().clone() for name, p in adapted.named_parameters()}
    source, target = batch_with_padding()
    labels = target.masked_fill(target.eq(0), -100)
    optimizer = torch.optim.AdamW([p for p in adapted.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        adapted(input_ids=source, attention_mask=source.ne(0), labels=labels).loss.backward()
        optimizer.step()
    moved = {name for name, p in adapted.named_parameters() if not torch.equal(p, before[name])}
    assert moved and all("lora_" in name for name in moved)
    assert {name for name in moved if "lora_B" in name}  # B starts at zero: it moved only if gradients reached it

    adapted.eval().save_pretrained(tmp_path / "adapter")
    reloaded = peft.AutoPeftModelForSeq2SeqLM.from_pretrained(tmp_path / "adapter").eval()
    inputs = dict(input_ids=source, attention_mask=source.ne(0), decoder_input_ids=target)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, adapted(**inputs).logits, atol=1e-6, rtol=1e-6)


def test_a_classifier_trains_its_head_beside_the_adapters_and_reloads_with_both(tmp_path):
    torch.manual_seed(0)
    TransformerForSequenceClassification(tiny_config(num_labels=3)).save_pretrained(tmp_path / "base")
    base = AutoModelForSequenceClassification.from_pretrained(tmp_path / "base")
    adapted = lora(base, "SEQ_CLS", target_modules=["q_proj", "v_proj"])
    # peft's SEQ_CLS task trains a head called `classifier` (or `score`) in full: the head must carry that name.
    trainable = {name for name, p in adapted.named_parameters() if p.requires_grad and "lora_" not in name}
    assert trainable == {
        "base_model.model.classifier.modules_to_save.default.weight",
        "base_model.model.classifier.modules_to_save.default.bias",
    }
    source, _ = batch_with_padding()
    optimizer = torch.optim.AdamW([p for p in adapted.parameters() if p.requires_grad], lr=1e-2)
    adapted.train()
    for _ in range(2):
        optimizer.zero_grad()
        adapted(input_ids=source, attention_mask=source.ne(0), labels=torch.tensor([0, 1, 2])).loss.backward()
        optimizer.step()
    adapted.eval().save_pretrained(tmp_path / "adapter")
    reloaded = peft.AutoPeftModelForSequenceClassification.from_pretrained(tmp_path / "adapter").eval()
    fresh_base = AutoModelForSequenceClassification.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        logits = adapted(input_ids=source, attention_mask=source.ne(0)).logits
        torch.testing.assert_close(reloaded(input_ids=source, attention_mask=source.ne(0)).logits, logits)
        assert (logits - fresh_base(input_ids=source, attention_mask=source.ne(0)).logits).abs().max() > 1e-3
