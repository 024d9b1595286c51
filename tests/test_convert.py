"""Faithfulness of hf_transformer.convert: reference models written from the documents' math, with the
documents' parameter names, randomly initialised, compared numerically with the converted models."""

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, BertConfig

from hf_transformer import TransformerModel
from hf_transformer.convert import from_book, from_seed
from tests.helpers.launch import load_benchmark_module, load_script

TOLERANCE = 1e-5
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "convert_checkpoint.py"

# The seed tutorial's Transformer, written plainly from its math (shared with the benchmark).
seed_reference = load_benchmark_module("seed_reference")
SeedTransformer = seed_reference.SeedTransformer

# ---------------------------------------------------------------------------------------------------
# Reference: the book-style encoder (learned positions from 0, LayerNorm(eps 1e-12) on the embeddings,
# pre-LN layers with PyTorch's default epsilon, one Linear per head, GELU, no mask, no final norm).
# ---------------------------------------------------------------------------------------------------


class BookEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.layer_norm = nn.LayerNorm(c.hidden_size, eps=1e-12)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])[None]
        return self.layer_norm(self.token_embeddings(ids) + self.position_embeddings(positions))


class BookHead(nn.Module):
    def __init__(self, width, head_width):
        super().__init__()
        self.Q = nn.Linear(width, head_width)
        self.K = nn.Linear(width, head_width)
        self.V = nn.Linear(width, head_width)

    def forward(self, x):
        q, k, v = self.Q(x), self.K(x), self.V(x)
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
        return weights @ v, weights


class BookAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        head_width = c.hidden_size // c.num_attention_heads
        self.heads = nn.ModuleList(BookHead(c.hidden_size, head_width) for _ in range(c.num_attention_heads))
        self.fc_layer = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x):
        outputs, weights = zip(*(head(x) for head in self.heads), strict=True)
        return self.fc_layer(torch.cat(outputs, dim=-1)), torch.stack(weights, dim=1)


class BookFeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc_layer1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc_layer2 = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x):
        return self.fc_layer2(F.gelu(self.fc_layer1(x)))


class BookLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c.hidden_size)
        self.layer_norm2 = nn.LayerNorm(c.hidden_size)
        self.attention = BookAttention(c)
        self.ffn = BookFeedForward(c)

    def forward(self, x):
        attended, weights = self.attention(self.layer_norm1(x))
        x = x + attended
        return x + self.ffn(self.layer_norm2(x)), weights


class BookEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BookEmbeddings(c)
        self.layers = nn.ModuleList(BookLayer(c) for _ in range(c.num_hidden_layers))

    def forward(self, ids):
        x = self.embeddings(ids)
        weights = []
        for layer in self.layers:
            x, w = layer(x)
            weights.append(w)
        return x, weights


# ---------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------

# Two seed configs: separate vocabularies with n_head * d_head != d_hidn and pad id 0; one vocabulary,
# a single layer and pad id 1.
SEED_CONFIGS = [
    dict(
        n_enc_vocab=30,
        n_dec_vocab=26,
        n_enc_seq=12,
        n_dec_seq=10,
        n_layer=2,
        d_hidn=16,
        i_pad=0,
        d_ff=24,
        n_head=3,
        d_head=7,
        dropout=0.1,
        layer_norm_epsilon=1e-12,
    ),
    dict(
        n_enc_vocab=20,
        n_dec_vocab=20,
        n_enc_seq=9,
        n_dec_seq=9,
        n_layer=1,
        d_hidn=12,
        i_pad=1,
        d_ff=20,
        n_head=2,
        d_head=6,
        dropout=0.1,
        layer_norm_epsilon=1e-12,
    ),
]
BOOK_CONFIG = dict(
    vocab_size=30,
    hidden_size=16,
    num_attention_heads=4,
    intermediate_size=28,
    max_position_embeddings=12,
    num_hidden_layers=2,
    hidden_dropout_prob=0.1,
)


def randomise(module: nn.Module) -> nn.Module:
    """Move every LayerNorm away from (1, 0) and every bias away from its default, so that a swapped or
    forgotten parameter changes the outputs."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if not parameter.requires_grad:
                continue
            if "layer_norm" in name and name.endswith("weight"):
                parameter.copy_(1 + 0.3 * torch.randn_like(parameter))
            elif name.endswith("bias"):
                parameter.copy_(0.3 * torch.randn_like(parameter))
    return module.eval()


def right_padded(lengths, width, vocab, pad, generator):
    """Rows of random non-pad ids of the given lengths, right-padded with ``pad`` to ``width``."""
    ids = torch.full((len(lengths), width), pad)
    for row, length in enumerate(lengths):
        tokens = torch.randint(4, vocab, (length,), generator=generator)
        ids[row, :length] = tokens
    return ids


def padded_batch(c, generator):
    """Padding-heavy: one full row, one row of a single token, the rest mostly padding."""
    source = right_padded([9, 1, 3, 5, 2], 9, c["n_enc_vocab"], c["i_pad"], generator)
    target = right_padded([7, 1, 2, 4, 7], 7, c["n_dec_vocab"], c["i_pad"], generator)
    target[:, 0] = 2  # the start token
    return source, target


def seed_pair(config_dict):
    reference = randomise(SeedTransformer(SimpleNamespace(**config_dict)))
    return reference, from_seed(reference.state_dict(), config_dict)


def max_difference(ours, theirs, rows):
    """Largest |difference| over the (batch, position) entries where ``rows`` is True."""
    return (ours - theirs).abs()[rows].max().item()


# ---------------------------------------------------------------------------------------------------
# from_seed
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_dict", SEED_CONFIGS, ids=["separate-vocab", "pad-id-1"])
def test_from_seed_reproduces_outputs_and_attention_probabilities(config_dict):
    generator = torch.Generator().manual_seed(1)
    reference, model = seed_pair(config_dict)
    assert not model.training
    source, target = padded_batch(config_dict, generator)
    pad = config_dict["i_pad"]
    source_real, target_real = source.ne(pad), target.ne(pad)
    with torch.no_grad():
        memory, output, encoder_probs, self_probs, cross_probs = reference(source, target)
        ours = model(input_ids=source, decoder_input_ids=target, output_attentions=True)
        fast = model(input_ids=source, decoder_input_ids=target)  # the default attention kernel

    differences = {
        "encoder": max_difference(ours.encoder_last_hidden_state, memory, source_real),
        "decoder": max_difference(ours.last_hidden_state, output, target_real),
        "encoder (default kernel)": max_difference(fast.encoder_last_hidden_state, memory, source_real),
        "decoder (default kernel)": max_difference(fast.last_hidden_state, output, target_real),
    }
    assert len(ours.encoder_attentions) == len(ours.decoder_attentions) == config_dict["n_layer"]
    for i in range(config_dict["n_layer"]):
        # Probabilities of every non-pad query over all keys: hidden keys must be 0 in both.
        for name, mine, theirs, rows in (
            ("encoder self", ours.encoder_attentions[i], encoder_probs[i], source_real),
            ("decoder self", ours.decoder_attentions[i], self_probs[i], target_real),
            ("cross", ours.cross_attentions[i], cross_probs[i], target_real),
        ):
            assert mine.shape == theirs.shape
            rows_per_head = rows[:, None, :].expand(-1, mine.shape[1], -1)
            differences[f"{name} attention, layer {i}"] = max_difference(mine, theirs, rows_per_head)
    print(differences)
    assert max(differences.values()) < TOLERANCE, differences


def test_from_seed_config_and_layout():
    config_dict = SEED_CONFIGS[0]
    reference, model = seed_pair(config_dict)
    config = model.config
    assert (config.vocab_size, config.decoder_vocab_size) == (30, 26)
    assert (config.num_attention_heads, config.head_dim, config.d_model) == (3, 7, 16)
    assert config.layer_norm_position == "post" and config.position_embedding_type == "sinusoidal"
    assert not (config.share_embeddings or config.scale_embedding or config.final_layer_norm)
    assert config.activation_function == "gelu" and config.attention_dropout == 0.1
    # Separate token tables, each the tutorial's own.
    encoder_table = model.encoder.embeddings.embed_tokens.weight
    decoder_table = model.decoder.embeddings.embed_tokens.weight
    assert encoder_table.data_ptr() != decoder_table.data_ptr()
    torch.testing.assert_close(encoder_table, reference.encoder.enc_emb.weight, rtol=0, atol=0)
    torch.testing.assert_close(decoder_table, reference.decoder.dec_emb.weight, rtol=0, atol=0)
    # The kernel-size-1 convolution becomes the Linear it is.
    torch.testing.assert_close(
        model.decoder.layers[1].feed_forward.fc2.weight, reference.decoder.layers[1].pos_ffn.conv2.weight[..., 0]
    )


def test_a_wrong_mapping_would_be_detected():
    """The comparison is sensitive: swapping the two LayerNorms of an encoder layer changes the outputs."""
    config_dict = SEED_CONFIGS[0]
    generator = torch.Generator().manual_seed(2)
    reference, _ = seed_pair(config_dict)
    state = reference.state_dict()
    for kind in ("weight", "bias"):
        first, second = f"encoder.layers.0.layer_norm1.{kind}", f"encoder.layers.0.layer_norm2.{kind}"
        state[first], state[second] = state[second], state[first]
    wrong = from_seed(state, config_dict)
    source, target = padded_batch(config_dict, generator)
    with torch.no_grad():
        memory = reference(source, target)[0]
        ours = wrong(input_ids=source, decoder_input_ids=target).encoder_last_hidden_state
    assert max_difference(ours, memory, source.ne(0)) > 1e-2


def _seed_state():
    reference = randomise(SeedTransformer(SimpleNamespace(**SEED_CONFIGS[0])))
    return reference.state_dict()


def test_from_seed_rejects_unknown_keys():
    state = _seed_state()
    state["encoder.layers.0.self_attn.W_O.weight"] = torch.zeros(16, 21)
    state["decoder.projection.weight"] = torch.zeros(26, 16)
    with pytest.raises(ValueError, match="unknown keys") as error:
        from_seed(state, SEED_CONFIGS[0])
    assert "encoder.layers.0.self_attn.W_O.weight" in str(error.value)
    assert "decoder.projection.weight" in str(error.value)


def test_from_seed_rejects_missing_keys():
    state = _seed_state()
    del state["decoder.layers.1.dec_enc_attn.W_K.bias"]
    del state["encoder.pos_emb.weight"]
    with pytest.raises(ValueError, match="missing keys") as error:
        from_seed(state, SEED_CONFIGS[0])
    assert "decoder.layers.1.dec_enc_attn.W_K.bias" in str(error.value)
    assert "encoder.pos_emb.weight" in str(error.value)


def test_from_seed_rejects_misshaped_keys():
    state = _seed_state()
    state["encoder.layers.0.pos_ffn.conv1.weight"] = state["encoder.layers.0.pos_ffn.conv1.weight"][..., 0]
    state["decoder.dec_emb.weight"] = torch.zeros(27, 16)
    with pytest.raises(ValueError, match="mis-shaped keys") as error:
        from_seed(state, SEED_CONFIGS[0])
    message = str(error.value)
    assert "encoder.layers.0.pos_ffn.conv1.weight: shape (24, 16), expected (24, 16, 1)" in message
    assert "decoder.dec_emb.weight: shape (27, 16), expected (26, 16)" in message


def test_from_seed_reports_every_problem_at_once():
    state = _seed_state()
    state["extra"] = torch.zeros(1)
    del state["encoder.enc_emb.weight"]
    state["decoder.layers.0.layer_norm3.bias"] = torch.zeros(3)
    with pytest.raises(ValueError) as error:
        from_seed(state, SEED_CONFIGS[0])
    message = str(error.value)
    assert "unknown keys (1): ['extra']" in message
    assert "missing keys (1): ['encoder.enc_emb.weight']" in message
    assert "decoder.layers.0.layer_norm3.bias: shape (3,)" in message


def test_from_seed_checks_the_frozen_position_table():
    state = _seed_state()
    state["decoder.pos_emb.weight"] = state["decoder.pos_emb.weight"].clone()
    state["decoder.pos_emb.weight"][3, 5] += 1e-3
    with pytest.raises(ValueError, match=r"\['decoder.pos_emb.weight'\] differ from the sinusoid table"):
        from_seed(state, SEED_CONFIGS[0])
    state = _seed_state()
    state["encoder.pos_emb.weight"] = state["encoder.pos_emb.weight"][:-1]  # a table of n_seq rows
    with pytest.raises(ValueError, match=r"encoder.pos_emb.weight: shape \(12, 16\), expected \(13, 16\)"):
        from_seed(state, SEED_CONFIGS[0])


def test_from_seed_rejects_a_config_that_is_not_the_seeds():
    state = _seed_state()
    config = dict(SEED_CONFIGS[0])
    del config["d_head"]
    config["n_heads"] = 3
    with pytest.raises(ValueError, match=r"missing keys \['d_head'\]; unknown keys \['n_heads'\]"):
        from_seed(state, config)
    # The same weights under a different config do not fit.
    with pytest.raises(ValueError, match="mis-shaped keys"):
        from_seed(state, dict(SEED_CONFIGS[0], d_ff=32))

    # The tutorial's own Config class (a dict answering attribute lookups), with a classifier's n_output.
    class Config(dict):
        __getattr__ = dict.__getitem__
        __setattr__ = dict.__setitem__

    model = from_seed(state, Config(SEED_CONFIGS[0], n_output=2))
    assert model.config.num_labels == 2


# ---------------------------------------------------------------------------------------------------
# from_book
# ---------------------------------------------------------------------------------------------------


def book_pair(config=BOOK_CONFIG):
    reference = randomise(BookEncoder(SimpleNamespace(**BOOK_CONFIG)))
    return reference, from_book(reference.state_dict(), config)


def test_from_book_reproduces_the_encoder_on_padded_batches():
    generator = torch.Generator().manual_seed(3)
    reference, model = book_pair()
    source = right_padded([10, 1, 4, 7], 10, BOOK_CONFIG["vocab_size"], 0, generator)
    with torch.no_grad():
        expected, expected_weights = reference(source)
        encoder = model.get_encoder()
        ours = encoder(input_ids=source, attention_mask=torch.ones_like(source), output_attentions=True)
        fast = encoder(input_ids=source, attention_mask=torch.ones_like(source))
    differences = {
        "encoder": (ours.last_hidden_state - expected).abs().max().item(),
        "encoder (default kernel)": (fast.last_hidden_state - expected).abs().max().item(),
    }
    for i, (mine, theirs) in enumerate(zip(ours.attentions, expected_weights, strict=True)):
        differences[f"attention, layer {i}"] = (mine - theirs).abs().max().item()
    print(differences)
    assert max(differences.values()) < TOLERANCE, differences
    # Without a mask the pad id is hidden, which the book does not do: the padded rows then differ.
    with torch.no_grad():
        masked = encoder(input_ids=source).last_hidden_state
    assert (masked[1, 0] - expected[1, 0]).abs().max() > 1e-3


def test_from_book_without_padding_needs_no_mask():
    generator = torch.Generator().manual_seed(4)
    reference, model = book_pair()
    source = right_padded([8, 8, 8], 8, BOOK_CONFIG["vocab_size"], 0, generator)
    with torch.no_grad():
        expected, _ = reference(source)
        ours = model.get_encoder()(input_ids=source).last_hidden_state
    assert (ours - expected).abs().max().item() < TOLERANCE


def test_from_book_config_heads_and_fresh_decoder():
    reference, model = book_pair()
    config = model.config
    assert config.layer_norm_position == "pre" and config.position_embedding_type == "learned"
    assert config.embedding_layer_norm and not config.final_layer_norm
    assert config.embedding_layer_norm_epsilon == 1e-12 and config.layer_norm_epsilon == 1e-5
    assert model.encoder.embeddings.layer_norm.eps == 1e-12
    assert model.encoder.layers[0].self_attn_sublayer.layer_norm.eps == 1e-5
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None
    assert config.pad_token_id == 0 and not config.share_embeddings
    # Head h occupies rows h*head_dim:(h+1)*head_dim of the fused projection.
    fused = model.encoder.layers[1].self_attn.v_proj
    for h, head in enumerate(reference.layers[1].attention.heads):
        torch.testing.assert_close(fused.weight[4 * h : 4 * h + 4], head.V.weight, rtol=0, atol=0)
        torch.testing.assert_close(fused.bias[4 * h : 4 * h + 4], head.V.bias, rtol=0, atol=0)
    # The decoder is new: its own token table, and exactly the initialisation a fresh model of this config gets.
    decoder_table = model.decoder.embeddings.embed_tokens.weight
    assert decoder_table.data_ptr() != model.encoder.embeddings.embed_tokens.weight.data_ptr()
    torch.manual_seed(11)
    fresh = TransformerModel(config)
    torch.manual_seed(11)
    converted = from_book(reference.state_dict(), BOOK_CONFIG)
    decoder_keys = [key for key in fresh.state_dict() if key.startswith("decoder.")]
    assert len(decoder_keys) > 20
    for key in decoder_keys:
        torch.testing.assert_close(converted.state_dict()[key], fresh.state_dict()[key], rtol=0, atol=0)
    assert not torch.equal(
        converted.decoder.layers[0].self_attn.q_proj.weight, model.decoder.layers[0].self_attn.q_proj.weight
    )
    generator = torch.Generator().manual_seed(5)
    source = right_padded([6, 3], 6, BOOK_CONFIG["vocab_size"], 0, generator)
    output = model(input_ids=source, decoder_input_ids=torch.tensor([[2, 7], [2, 0]]))
    assert output.last_hidden_state.shape == (2, 2, 16) and torch.isfinite(output.last_hidden_state).all()


def test_from_book_accepts_a_bert_config_and_reads_only_what_the_book_reads():
    config = BertConfig(**BOOK_CONFIG, layer_norm_eps=1e-7, hidden_act="relu", pad_token_id=1)
    reference, model = book_pair(config)
    assert model.config.layer_norm_epsilon == 1e-5 and model.config.activation_function == "gelu"
    assert model.config.pad_token_id == 1
    generator = torch.Generator().manual_seed(6)
    source = right_padded([5, 5], 5, BOOK_CONFIG["vocab_size"], 0, generator)
    with torch.no_grad():
        difference = (model.get_encoder()(input_ids=source).last_hidden_state - reference(source)[0]).abs().max()
    assert difference < TOLERANCE


def test_a_wrong_head_order_would_be_detected():
    generator = torch.Generator().manual_seed(7)
    reference, _ = book_pair()
    state = reference.state_dict()
    for kind in ("weight", "bias"):
        first, second = f"layers.0.attention.heads.0.Q.{kind}", f"layers.0.attention.heads.1.Q.{kind}"
        state[first], state[second] = state[second], state[first]
    wrong = from_book(state, BOOK_CONFIG)
    source = right_padded([6, 6], 6, BOOK_CONFIG["vocab_size"], 0, generator)
    with torch.no_grad():
        difference = (wrong.get_encoder()(input_ids=source).last_hidden_state - reference(source)[0]).abs().max()
    assert difference > 1e-3


def test_from_book_rejects_unknown_missing_and_misshaped_keys():
    state = randomise(BookEncoder(SimpleNamespace(**BOOK_CONFIG))).state_dict()
    state["layers.0.attention.heads.4.Q.weight"] = torch.zeros(4, 16)  # a fifth head
    del state["layers.1.attention.heads.2.K.bias"]
    state["layers.1.ffn.fc_layer1.weight"] = state["layers.1.ffn.fc_layer1.weight"].t()
    with pytest.raises(ValueError) as error:
        from_book(state, BOOK_CONFIG)
    message = str(error.value)
    assert "unknown keys (1): ['layers.0.attention.heads.4.Q.weight']" in message
    assert "missing keys (1): ['layers.1.attention.heads.2.K.bias']" in message
    assert "layers.1.ffn.fc_layer1.weight: shape (16, 28), expected (28, 16)" in message
    with pytest.raises(ValueError, match=r"lacks \['hidden_dropout_prob'\]"):
        from_book(state, {k: v for k, v in BOOK_CONFIG.items() if k != "hidden_dropout_prob"})


# ---------------------------------------------------------------------------------------------------
# scripts/convert_checkpoint.py
# ---------------------------------------------------------------------------------------------------


def test_script_converts_a_seed_checkpoint_that_automodel_loads(tmp_path, capsys):
    config_dict = SEED_CONFIGS[0]
    reference, converted = seed_pair(config_dict)
    # The tutorial's save format: the Transformer inside a classifier, under "state_dict".
    wrapped = {f"transformer.{key}": value for key, value in reference.state_dict().items()}
    wrapped["projection_cls.weight"] = torch.zeros(2, 16)
    torch.save({"epoch": 3, "loss": 0.5, "state_dict": wrapped}, tmp_path / "model.pth")
    (tmp_path / "config.json").write_text(json.dumps(config_dict))

    out = tmp_path / "converted"
    argv = ["--from", "seed", "--prefix", "transformer.", str(tmp_path / "model.pth"), str(tmp_path / "config.json")]
    assert load_script("convert_checkpoint").main([*argv, str(out)]) == 0
    assert "projection_cls.weight" in capsys.readouterr().err

    loaded = AutoModel.from_pretrained(out)
    assert isinstance(loaded, TransformerModel) and not loaded.training
    generator = torch.Generator().manual_seed(8)
    source, target = padded_batch(config_dict, generator)
    with torch.no_grad():
        memory, output = reference(source, target)[:2]
        ours = loaded(input_ids=source, decoder_input_ids=target)
        in_memory = converted(input_ids=source, decoder_input_ids=target)
    assert torch.equal(ours.last_hidden_state, in_memory.last_hidden_state)
    assert torch.equal(ours.encoder_last_hidden_state, in_memory.encoder_last_hidden_state)
    assert max_difference(ours.encoder_last_hidden_state, memory, source.ne(0)) < TOLERANCE
    assert max_difference(ours.last_hidden_state, output, target.ne(0)) < TOLERANCE


def test_script_refuses_a_checkpoint_of_other_objects_and_a_missing_one_in_one_line(tmp_path, capsys):
    import numpy as np

    (tmp_path / "config.json").write_text(json.dumps(SEED_CONFIGS[0]))
    # A loss saved as a numpy number: not read without running pickled code, which a file may carry from anywhere.
    torch.save({"epoch": 3, "loss": np.float32(0.5), "state_dict": {}}, tmp_path / "model.pth")
    for checkpoint, said in (
        (tmp_path / "model.pth", "holds objects beside its tensors"),
        (tmp_path / "no.pth", "no.pth"),
    ):
        with pytest.raises(SystemExit):
            load_script("convert_checkpoint").main(
                ["--from", "seed", str(checkpoint), str(tmp_path / "config.json"), str(tmp_path / "out")]
            )
        error = capsys.readouterr().err
        assert said in error and "Traceback" not in error


def test_script_refuses_a_bad_config_and_an_output_folder_it_would_write_over_in_one_line(tmp_path, capsys):
    torch.save(_seed_state(), tmp_path / "model.pth")
    (tmp_path / "config.json").write_text(json.dumps(SEED_CONFIGS[0]))
    (tmp_path / "broken.json").write_text("{'n_layer': 6")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "a-file").write_text("keep")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "config.json").write_text('{"mine": 1}')
    for config, out, said in (
        ("missing.json", "out", "missing.json"),
        ("broken.json", "out", "broken.json: not a JSON file"),
        ("list.json", "out", "list.json: expected a JSON object of settings, got a list"),
        ("config.json", "a-file", "a-file is a file"),
        ("config.json", "taken", "taken already holds files (config.json): give a new or empty folder, or --force"),
    ):
        with pytest.raises(SystemExit):
            load_script("convert_checkpoint").main(
                ["--from", "seed", str(tmp_path / "model.pth"), str(tmp_path / config), str(tmp_path / out)]
            )
        error = capsys.readouterr().err
        assert said in error and "Traceback" not in error
    assert (tmp_path / "a-file").read_text() == "keep" and not (tmp_path / "out").exists()
    assert (taken / "config.json").read_text() == '{"mine": 1}'
    argv = ["--from", "seed", str(tmp_path / "model.pth"), str(tmp_path / "config.json"), str(taken), "--force"]
    assert load_script("convert_checkpoint").main(argv) == 0
    assert isinstance(AutoModel.from_pretrained(taken), TransformerModel)


@pytest.mark.slow
def test_script_converts_a_book_checkpoint_that_automodel_loads(tmp_path):
    reference, _ = book_pair()
    torch.save(reference.state_dict(), tmp_path / "encoder.pt")
    (tmp_path / "config.json").write_text(json.dumps(BOOK_CONFIG))
    out = tmp_path / "converted"
    # As a program, the way users run it.
    command = [
        sys.executable,
        str(SCRIPT),
        "--from",
        "book",
        str(tmp_path / "encoder.pt"),
        str(tmp_path / "config.json"),
    ]
    result = subprocess.run([*command, str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "decoder is freshly initialised" in result.stdout
    loaded = AutoModel.from_pretrained(out)
    generator = torch.Generator().manual_seed(9)
    source = right_padded([7, 2], 7, BOOK_CONFIG["vocab_size"], 0, generator)
    with torch.no_grad():
        ours = loaded.get_encoder()(input_ids=source, attention_mask=torch.ones_like(source)).last_hidden_state
    assert (ours - reference(source)[0]).abs().max().item() < TOLERANCE


def test_script_stops_on_a_bad_checkpoint(tmp_path):
    state = _seed_state()
    del state["decoder.layers.0.self_attn.linear.weight"]
    torch.save(state, tmp_path / "model.pth")
    (tmp_path / "config.json").write_text(json.dumps(SEED_CONFIGS[0]))
    out = tmp_path / "converted"
    with pytest.raises(ValueError, match="decoder.layers.0.self_attn.linear.weight"):
        load_script("convert_checkpoint").main(
            ["--from", "seed", str(tmp_path / "model.pth"), str(tmp_path / "config.json"), str(out)]
        )
    assert not out.exists()
