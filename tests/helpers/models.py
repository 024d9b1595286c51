"""Helpers of the tests: tiny configurations and batches, and recording calls (``from tests.helpers.models import
...``, in the library's tests and the recipes' alike)."""

import torch

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerConfig, TransformerForConditionalGeneration

# The test models are tiny: one thread is fastest, and it cannot be starved by another busy process.
torch.set_num_threads(1)


def record_calls(monkeypatch, owner: type, method: str) -> list:
    """Wraps ``owner.method`` for the test: each call still runs it, and appends its first argument (``self`` for a
    method; for a module's function, such as ``F.scaled_dot_product_attention``, its first input) to the returned
    list."""
    calls = []
    original = getattr(owner, method)

    def recording(obj, *args, **kwargs):
        calls.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(owner, method, recording)
    return calls


def tiny_config(**overrides) -> TransformerConfig:
    """A model small enough for many forward/backward passes per second on a CPU."""
    settings = dict(
        vocab_size=40,
        d_model=32,
        n_layer=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=24,
        dropout=0.0,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    if {"encoder_layers", "decoder_layers"} & set(overrides) and "n_layer" not in overrides:
        depth = settings.pop("n_layer")  # the depth of the stack not given
        settings.update(encoder_layers=depth, decoder_layers=depth)
    settings.update(overrides)
    return TransformerConfig(**settings)


# Made-up English sentences of 2 to 10 words over 19 words, each ending in " .": text enough for a 90-piece tokenizer.
WORDS = "a man woman dog cat rides runs sits on the red big small bike grass snow in with two".split()
SENTENCES = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(2 + i % 9)) + " ." for i in range(24)]


def sentence_tokenizer(model_max_length: int = 256):
    """A 90-piece BPE tokenizer trained on ``SENTENCES`` (BPE: the same pieces and ids in every process). The
    default ``model_max_length`` is longer than the test models' position tables."""
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(
        SENTENCES, vocab_size=90, model_type="bpe", model_max_length=model_max_length, show_progress=False
    )


def save_random_translator(folder, tokenizer, *, max_position_embeddings: int, max_new_tokens: int):
    """A random translator, pre-LN with large weights so that its beam candidates differ (from each other and from
    greedy decoding), with the tokenizer's special tokens; saved with the tokenizer in ``folder``, returned."""
    from hf_transformer import TransformerForConditionalGeneration

    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer), n_layer=2, max_position_embeddings=max_position_embeddings, init_std=0.3,
        label_smoothing=0.0, layer_norm_position="pre", pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    model = TransformerForConditionalGeneration(config).eval()
    model.generation_config.max_new_tokens = max_new_tokens
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def batch_with_padding():
    """Source (B=3, S=7) and target (B=3, T=5), right-padded with id 0; row 2 of the source is the longest."""
    source = torch.tensor([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3]])
    target = torch.tensor([[2, 20, 21, 22, 23], [2, 24, 0, 0, 0], [2, 25, 26, 27, 0]])
    return source, target


def _card_cell(value) -> str:
    """A value as the card's settings table shows it (hf_transformer.hub.settings_table)."""
    import json

    shown = value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False, default=str)
    return shown.replace("|", "\\|").replace("\n", " ")


def card_settings(card: str) -> dict[str, str]:
    """The rows of a model card's settings table: name -> value as shown."""
    import re

    table = r"<summary>Settings</summary>\n\n\| setting \| value \|\n\|---\|---\|\n(.*?)\n\n</details>"
    block = re.search(table, card, re.S)
    assert block, "the card has no settings table"
    rows = [re.fullmatch(r"\| (\S+) \| (.*) \|", line) for line in block.group(1).splitlines()]
    assert all(rows), block.group(1)
    return {row.group(1): row.group(2) for row in rows}


def trained_with(folder) -> dict:
    """What ``hf_transformer.training.training_settings`` should give for the run that wrote ``folder``, read from the
    folder: the TrainingArguments it saved (``training_args.bin``) and its ``log_history.json``."""
    import json
    from pathlib import Path

    args = torch.load(Path(folder) / "training_args.bin", weights_only=False)
    history = json.loads((Path(folder) / "log_history.json").read_text())
    steps, epoch = history[-1]["step"], history[-1]["epoch"]
    return {
        "optimizer": str(getattr(args.optim, "value", args.optim)),
        "learning_rate": args.learning_rate,
        "lr_scheduler_type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
        "warmup_steps": args.get_warmup_steps(steps),
        "weight_decay": args.weight_decay,
        "train_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "optimizer_steps": steps,
        "epochs": round(epoch, 2),
        "precision": "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32",
        "seed": args.seed,
    }


def check_card_describes_folder(folder, run_settings=None, *, base_model=None, repo_id=None, card=None) -> str:
    """Checks every field of a model card (the folder's README.md, or ``card``) against the folder it describes and
    returns the card: each row of its settings table against the saved config.json and tokenizer, or else against
    ``run_settings`` (the run's settings the folder does not keep, every one shown); no null value; the size and
    vocabulary of its description against the weights and the config; ``base_model`` in its metadata; the usage
    snippet's ``repo_id`` (default: the placeholder that says so); and where the folder has a ``results.json``, the
    counts of rows the card gives (trained on, each split scored) against it."""
    import json
    import re
    from pathlib import Path

    from huggingface_hub import ModelCard
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from hf_transformer.hub import PLACEHOLDER_NOTE

    folder = Path(folder)
    card = (folder / "README.md").read_text(encoding="utf-8") if card is None else card
    config = TransformerConfig.from_pretrained(folder)
    shown = card_settings(card)
    assert "null" not in shown.values(), shown
    run_settings = dict(run_settings or {})
    tokenizer = AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer.json").is_file() else None
    for name, value in shown.items():
        if name == "tokenizer":
            assert value == type(tokenizer.backend_tokenizer.model).__name__
        elif name == "tokenizer_vocab_size":
            assert int(value) == len(tokenizer), (value, len(tokenizer))
        elif name == "lowercase":
            assert value == "true" and tokenizer.backend_tokenizer.normalizer.normalize_str("AÄ") == "aä"
        elif name in config.to_dict() or name == "num_labels":
            assert value == _card_cell(getattr(config, name)), (name, value, getattr(config, name))
        else:
            assert name in run_settings, f"{name} = {value}: neither the folder's nor the run's setting"
            assert value == _card_cell(run_settings[name]), (name, value, run_settings[name])
    assert set(run_settings) <= set(shown), set(run_settings) - set(shown)
    if tokenizer is not None:
        assert {"tokenizer", "tokenizer_vocab_size"} <= set(shown)
    for required in ("vocab_size", "d_model", "encoder_layers", "num_attention_heads", "intermediate_size", "dropout"):
        assert required in shown, required

    weights = load_file(str(folder / "model.safetensors"))
    assert f"{sum(tensor.numel() for tensor in weights.values()):,} parameters" in card
    assert f"vocabulary {config.vocab_size}." in card
    assert ModelCard(card).data.base_model == base_model
    snippet_repo = re.findall(r'^repo_id = "([^"]*)"(.*)$', card, re.M)
    if repo_id is None:
        assert snippet_repo == [(f"your-name/{folder.resolve().name}", "  # " + PLACEHOLDER_NOTE)]
    else:
        assert snippet_repo == [(repo_id, "")]

    if (folder / "results.json").is_file():
        results = json.loads((folder / "results.json").read_text())
        patterns = {
            "train_samples": r"on ([\d,]+) training (?:rows|pairs|texts)",
            "eval_samples": r"\| validation \(([\d,]+) (?:rows|pairs|texts)\)",
            "test_samples": r"\| test\w* \(([\d,]+) (?:rows|pairs|texts)\)",
        }
        for key, pattern in patterns.items():
            found = re.findall(pattern, card)
            assert found == ([f"{results[key]:,}"] if key in results else []), (key, found, results.get(key))
    return card


def random_translator(tokenizer, seed: int = 0, **overrides):
    """A tiny translation model (``tiny_config``) for ``tokenizer``, with weights larger than its initialisation
    gives, so that its outputs depend on the input."""
    torch.manual_seed(seed)
    settings = dict(vocab_size=len(tokenizer), max_position_embeddings=48)  # tiny_config's depth: 2 + 2 layers
    settings.update(overrides)
    model = TransformerForConditionalGeneration(tiny_config(**settings)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed" in name:
                parameter.normal_(0.0, 1.0)
            elif parameter.dim() == 2:
                parameter.normal_(0.0, 1.5 / parameter.shape[1] ** 0.5)
            elif "layer_norm" in name and name.endswith("weight"):
                parameter.normal_(1.0, 0.2)
            else:
                parameter.normal_(0.0, 0.2)
    return model


def teacher_forced_log_probs(model, batch, rows: list[list[int]]) -> list[torch.Tensor]:
    """Per input, the HF model's log-probabilities of its tokens ``rows`` followed by the end token."""
    start, eos = model.config.decoder_start_token_id, model.config.eos_token_id
    scores = []
    for index, row in enumerate(rows):
        target = row if row and row[-1] == eos else row + [eos]
        real = batch["attention_mask"][index].bool()
        with torch.no_grad():
            logits = model(
                input_ids=batch["input_ids"][index : index + 1, real],
                decoder_input_ids=torch.tensor([[start] + target[:-1]]),
            ).logits[0]
        scores.append(logits.log_softmax(-1).gather(-1, torch.tensor(target)[:, None])[:, 0])
    return scores


def hf_tokens(model, batch, max_new_tokens: int = 10, **kwargs) -> tuple[list[list[int]], torch.Tensor | None]:
    """``model.generate``'s tokens without the start token, each row cut after its first end token; and the
    beam scores (``sequences_scores``) in beam search."""
    with torch.no_grad():
        output = model.generate(
            **batch, max_new_tokens=max_new_tokens, return_dict_in_generate=True, output_scores=True, **kwargs
        )
    eos = model.config.eos_token_id
    rows = []
    for row in output.sequences[:, 1:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows, getattr(output, "sequences_scores", None)
