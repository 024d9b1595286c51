"""LoRA adapters through peft, as a user fine-tunes a saved folder: every projection can take an adapter, the adapted
model computes what the merged weights compute (in `generate` too, where the CPU decoding path multiplies by
packed copies of the base weights), only the adapters and the classifier learn, and the adapter folder loads back
through peft's Auto classes."""

from __future__ import annotations

import copy
import json
import sys
import tempfile

import peft
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification, speed
from tests.helpers.models import batch_with_padding, record_calls, sentence_tokenizer, tiny_config

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


@pytest.mark.slow
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
        # Each returned beam's score is the merged model's log-probability of it over its 6 new tokens (the two
        # sum in different orders: compared to rounding, never token for token).
        with torch.no_grad():
            log_probs = merged(
                input_ids=source, attention_mask=source.ne(0), decoder_input_ids=out.sequences[:, :-1]
            ).logits.log_softmax(-1)
        chosen = log_probs.gather(-1, out.sequences[:, 1:, None]).squeeze(-1)
        torch.testing.assert_close(out.sequences_scores, chosen.sum(-1) / 6, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
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


# ---------------------------------------------------------------------------------------------------
# Adapter folders on the way to deployment (hf_transformer.adapters): merged, predicted with, exported
# ---------------------------------------------------------------------------------------------------

TEXTS = ["a man rides a red bike .", "two dogs in the snow .", "a cat sits on the big grass with a small dog ."]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Base folders (seq2seq, classifier; each with its tokenizer) and adapter folders trained on nothing but with
    random adapters (no tokenizer: the base's is read), with the adapted models."""
    tokenizer = sentence_tokenizer(model_max_length=16)
    root = tmp_path_factory.mktemp("adapters")
    torch.manual_seed(0)
    settings = dict(vocab_size=len(tokenizer), max_position_embeddings=16, init_std=0.1)
    bases = {
        "seq2seq": TransformerForConditionalGeneration(tiny_config(**settings)),
        "classification": TransformerForSequenceClassification(tiny_config(num_labels=3, **settings)),
    }
    adapted = {}
    for task, model in bases.items():
        model.save_pretrained(root / f"{task}-base")
        tokenizer.save_pretrained(root / f"{task}-base")
        base = AutoModelForSeq2SeqLM if task == "seq2seq" else AutoModelForSequenceClassification
        model = lora(base.from_pretrained(root / f"{task}-base"), "SEQ_2_SEQ_LM" if task == "seq2seq" else "SEQ_CLS")
        with torch.no_grad():
            if task == "classification":  # the head peft trains in full: moved too, as training would move it
                model.base_model.model.classifier.modules_to_save.default.weight.normal_(0.0, 1.0)
        model.eval().save_pretrained(root / f"{task}-adapter")
        adapted[task] = model
    return root, tokenizer, adapted


def test_merge_adapter_writes_a_whole_folder_that_computes_what_the_adapted_model_computes(folders, tmp_path):
    from hf_transformer.adapters import is_adapter_folder, merge_adapter

    root, tokenizer, adapted = folders
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    for task, auto in (("seq2seq", AutoModelForSeq2SeqLM), ("classification", AutoModelForSequenceClassification)):
        assert is_adapter_folder(root / f"{task}-adapter") and not is_adapter_folder(root / f"{task}-base")
        merged = merge_adapter(root / f"{task}-adapter", tmp_path / task)
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in merged.iterdir()}
        model = auto.from_pretrained(merged).eval()
        inputs = dict(batch) | ({"decoder_input_ids": batch["input_ids"][:, :5]} if task == "seq2seq" else {})
        with torch.no_grad():
            torch.testing.assert_close(model(**inputs).logits, adapted[task](**inputs).logits, atol=1e-5, rtol=1e-5)


def test_a_predictor_reads_an_adapter_folder_as_its_merged_model(folders):
    from hf_transformer import Predictor

    # The reference is the adapted model merged in memory: the predictor's own computation, so tokens and labels are
    # compared exactly (the merge's equality to the adapted model, to rounding, is the test above).
    root, tokenizer, adapted = folders
    merged = {task: copy.deepcopy(model).merge_and_unload().eval() for task, model in adapted.items()}
    translator = Predictor.from_pretrained(root / "seq2seq-adapter", num_beams=3, max_new_tokens=6)
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    expected = merged["seq2seq"].generate(**batch, num_beams=3, max_new_tokens=6)
    assert translator.translate(TEXTS) == tokenizer.batch_decode(expected, skip_special_tokens=True)
    classifier = Predictor.from_pretrained(root / "classification-adapter")
    with torch.no_grad():
        probabilities = merged["classification"](**batch).logits.softmax(-1)
    results = classifier.classify(TEXTS)
    assert [result["label"] for result in results] == [
        merged["classification"].config.id2label[i] for i in probabilities.argmax(-1).tolist()
    ]
    scores = torch.tensor([result["score"] for result in results])
    torch.testing.assert_close(scores, probabilities.max(-1).values, atol=1e-5, rtol=0)


def test_an_adapter_saved_without_a_task_type_is_read_with_its_base_models_head(folders, tmp_path):
    from hf_transformer import Predictor

    root, tokenizer, _ = folders
    base = AutoModelForSeq2SeqLM.from_pretrained(root / "seq2seq-base")
    adapted = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    adapted.eval().save_pretrained(tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["task_type"] is None
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    expected = copy.deepcopy(adapted).merge_and_unload().generate(**batch, num_beams=1, max_new_tokens=6)
    translator = Predictor.from_pretrained(tmp_path / "adapter", num_beams=1, max_new_tokens=6)
    assert translator.translate(TEXTS) == tokenizer.batch_decode(expected, skip_special_tokens=True)


@pytest.mark.slow
def test_exports_of_an_adapter_folder_are_those_of_its_merged_model(folders, tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    pytest.importorskip("onnxruntime")
    from hf_transformer.adapters import merge_adapter
    from hf_transformer.export import to_ctranslate2, to_onnx
    from hf_transformer.export.onnx_export import OnnxClassifier

    root, tokenizer, adapted = folders
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the exporters merge into
    (tmp_path / "tmp").mkdir()
    merged = merge_adapter(root / "seq2seq-adapter", tmp_path / "merged")
    from_adapter = to_ctranslate2(root / "seq2seq-adapter", tmp_path / "ct2-adapter")
    from_merged = to_ctranslate2(merged, tmp_path / "ct2-merged")
    assert (from_adapter / "model.bin").read_bytes() == (from_merged / "model.bin").read_bytes()
    assert "tokenizer.json" in {path.name for path in from_adapter.iterdir()}

    exported = to_onnx(root / "classification-adapter", tmp_path / "onnx")
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = adapted["classification"](**batch).logits.numpy()
    onnx_classifier = OnnxClassifier(exported, intra_op_num_threads=1)
    assert abs(onnx_classifier(batch["input_ids"].numpy(), batch["attention_mask"].numpy()) - expected).max() <= 1e-4
    assert not any((tmp_path / "tmp").iterdir())  # the merged models are gone


def test_an_adapter_folder_is_never_replaced_by_what_is_made_from_it(folders):
    from hf_transformer.adapters import merge_adapter
    from hf_transformer.export import to_ctranslate2

    root, _, _ = folders
    adapter = root / "seq2seq-adapter"
    before = sorted(path.name for path in adapter.iterdir())
    with pytest.raises(ValueError, match="would replace the adapter folder"):
        merge_adapter(adapter, adapter)
    with pytest.raises(ValueError, match="would replace the adapter folder"):
        to_ctranslate2(adapter, adapter.parent, force=True)
    assert sorted(path.name for path in adapter.iterdir()) == before


def test_an_adapter_folder_without_peft_or_without_its_base_says_so(folders, tmp_path, monkeypatch):
    from hf_transformer.saved_folder import read_folder

    root, _, _ = folders
    broken = tmp_path / "no-base"
    broken.mkdir()
    settings = json.loads((root / "seq2seq-adapter" / "adapter_config.json").read_text())
    (broken / "adapter_config.json").write_text(json.dumps(settings | {"base_model_name_or_path": None}))
    with pytest.raises(ValueError, match="names no base model"):
        read_folder(broken)
    # A base that is not there, named as a path or (relative, one slash) as a Hub id would be: the adapter and the
    # base named in one line, not an error of the Hub client.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    for base, reading in (
        (str(tmp_path / "gone"), read_folder),
        ("runs_gone/base", lambda f: read_folder(f).load_model()),
    ):
        (broken / "adapter_config.json").write_text(json.dumps(settings | {"base_model_name_or_path": base}))
        with pytest.raises(ValueError, match=f"no-base is a LoRA adapter on {base}, which is not a folder here"):
            reading(broken)
    # A classifier adapter's head is read before its base: the missing base is named all the same.
    import shutil

    classifier = tmp_path / "classifier-no-base"
    shutil.copytree(root / "classification-adapter", classifier)
    saved = json.loads((classifier / "adapter_config.json").read_text())
    (classifier / "adapter_config.json").write_text(json.dumps(saved | {"base_model_name_or_path": "runs_gone/base"}))
    with pytest.raises(
        ValueError, match="classifier-no-base is a LoRA adapter on runs_gone/base, which is not a folder"
    ):
        read_folder(classifier).load_model()
    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    with pytest.raises(ImportError, match="holds a LoRA adapter .* needs peft"):
        read_folder(root / "seq2seq-adapter").load_model()


def test_an_adapter_on_the_token_table_adapts_a_classifier_and_is_refused_where_the_table_is_shared():
    # An encoder classifier reads its table alone: adapted and merged compute the same. A seq2seq model shares the
    # table with its decoder and output projection, a masked-token model with its output projection: peft wraps the
    # encoder's reference alone, so the adapted model would differ from its own merged weights; refused by name.
    from hf_transformer import TransformerForMaskedLM

    source, target = batch_with_padding()
    inputs = {"input_ids": source, "attention_mask": source.ne(0)}
    torch.manual_seed(0)
    classifier = TransformerForSequenceClassification(tiny_config(num_labels=2)).eval()
    embedded = lora(classifier, "SEQ_CLS", target_modules=["embed_tokens"])
    with torch.no_grad():
        adapted = embedded(**inputs).logits
        merged = copy.deepcopy(embedded).merge_and_unload()(**inputs).logits
    torch.testing.assert_close(adapted, merged, atol=1e-5, rtol=1e-5)
    shared = [
        (
            TransformerForConditionalGeneration(tiny_config()),
            "SEQ_2_SEQ_LM",
            {"decoder_input_ids": target},
            "the decoder",
        ),
        (TransformerForMaskedLM(tiny_config()), None, {}, "the output projection"),
    ]
    for model, task, more, with_what in shared:
        adapted_model = lora(model.eval(), task, target_modules=["embed_tokens"])
        with pytest.raises(ValueError, match=f"shared by the encoder and {with_what}.*leave embed_tokens out"):
            adapted_model(**inputs, **more)


def test_a_classifier_adapter_of_more_labels_than_its_base_config_loads_with_its_own_head(folders, tmp_path):
    # Trained from a base folder given num_labels=3 (a pretrained encoder, here the seq2seq folder, whose config keeps
    # its own 2): the folder is read with the adapter's three labels, not refused by a size mismatch deep in peft.
    from hf_transformer import Predictor

    root, tokenizer, _ = folders
    base = AutoModelForSequenceClassification.from_pretrained(root / "seq2seq-base", num_labels=3)
    assert AutoModelForSequenceClassification.from_pretrained(root / "seq2seq-base").config.num_labels == 2
    adapted = lora(base, "SEQ_CLS")
    with torch.no_grad():
        adapted.base_model.model.classifier.modules_to_save.default.weight.normal_(0.0, 1.0)
    adapted.eval().save_pretrained(tmp_path / "adapter")
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = copy.deepcopy(adapted).merge_and_unload()(**batch).logits.softmax(-1)
    results = Predictor.from_pretrained(tmp_path / "adapter").classify(TEXTS)
    assert [result["label"] for result in results] == [f"LABEL_{i}" for i in expected.argmax(-1).tolist()]
    assert sorted(results[0]["scores"]) == ["LABEL_0", "LABEL_1", "LABEL_2"]


def test_a_translation_adapter_on_a_base_without_a_decoder_is_refused_and_a_classifier_adapter_holds_its_head(
    folders, tmp_path
):
    """A translation adapter trained on a masked-token base: the decoder is not in the base folder nor in the
    adapter, so every load would draw it at random (refused, naming what is lacking, by every reader). A classifier
    adapter on the same base holds the head it trained in full: it loads."""
    from hf_transformer import Predictor, TransformerForMaskedLM
    from hf_transformer.adapters import merge_adapter
    from hf_transformer.saved_folder import FolderError

    root, tokenizer, _ = folders
    torch.manual_seed(0)
    settings = dict(vocab_size=len(tokenizer), max_position_embeddings=16, init_std=0.1)
    TransformerForMaskedLM(tiny_config(**settings)).save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    lora(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "mlm"), "SEQ_2_SEQ_LM").save_pretrained(tmp_path / "mt")
    told = r"mt is a LoRA adapter \(seq2seq\) on .*mlm, which lacks 52 of the weights that model needs \(model\.decoder"
    with pytest.raises(FolderError, match=told):
        Predictor.from_pretrained(tmp_path / "mt")
    with pytest.raises(FolderError, match=told):
        merge_adapter(tmp_path / "mt", tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    classifier = lora(AutoModelForSequenceClassification.from_pretrained(tmp_path / "mlm"), "SEQ_CLS")
    classifier.save_pretrained(tmp_path / "c")
    assert len(Predictor.from_pretrained(tmp_path / "c").classify(TEXTS)) == len(TEXTS)


def test_an_adapter_on_a_base_of_other_sizes_names_both_folders(folders, tmp_path):
    from hf_transformer import Predictor
    from hf_transformer.saved_folder import FolderError

    root, tokenizer, _ = folders
    torch.manual_seed(0)
    wider = TransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), max_position_embeddings=16, d_model=48, num_attention_heads=4)
    )
    wider.save_pretrained(tmp_path / "wider-base")
    tokenizer.save_pretrained(tmp_path / "wider-base")
    lora(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "wider-base"), "SEQ_2_SEQ_LM").save_pretrained(tmp_path / "a")
    settings = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = str(root / "seq2seq-base")  # pointed at a base of another width
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps(settings))
    told = r"a is a LoRA adapter trained on a model of other sizes than .*seq2seq-base \(size mismatch for "
    with pytest.raises(FolderError, match=told):
        Predictor.from_pretrained(tmp_path / "a")
