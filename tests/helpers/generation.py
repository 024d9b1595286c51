"""Comparing two ``generate`` runs that take different kernels (cache or none, packed or MKL products, eager or
compiled steps, static or growing cache). Their logits agree to rounding, not bit for bit, so their tokens may part
where two candidates are within rounding of a tie (or a random draw within rounding of a boundary).
:func:`assert_generations_agree` asks for the same tokens up to the first step at which a row (in beam search: an
input's beams) parts, checks that this step is a genuine near-tie, and compares the logits of every step up to and
including it with a tolerance: until a row parts, both runs feed it the same tokens. A real difference between the
paths (a stale cache, a wrong mask, weights packed from old values, other random draws) moves the logits far beyond
rounding, or parts the tokens where there is no tie: either fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

# Two kernels computing the same float32 logits or log-probabilities (a few units) agree to about 1e-6.
RTOL = ATOL = 1e-5
# What each compared run asks generate for: the logits (what the kernels computed) and the scores its tokens were
# picked from (the logits after generate's processors: a top-k filter, a minimum length...).
SCORED = dict(output_logits=True, output_scores=True, return_dict_in_generate=True)


def assert_generations_agree(model, reference: Callable, other: Callable, *, sampling_seed: int | None = None):
    """Runs ``reference()`` and ``other()``, two generations by ``model`` (``generate`` calls with the arguments in
    ``SCORED``), and asserts that they agree as the module's docstring says. For sampling, pass the seed: each run
    starts from ``torch.manual_seed(sampling_seed)``, and each run's tokens must be the draws from its own scores
    with that random stream, so that tokens can part only where the logits do. Returns both outputs."""
    runs = []
    for run in (reference, other):
        with _recorded_beam_candidates(model) as candidates:
            if sampling_seed is not None:
                torch.manual_seed(sampling_seed)
            output = run()
        assert output.scores is not None and output.logits is not None, "generate needs the arguments in SCORED"
        runs.append((output, candidates))
    (first, first_candidates), (second, second_candidates) = runs
    if first_candidates:
        assert sampling_seed is None, "beam search with sampling is not compared here"
        _assert_beam_searches_agree(first, second, first_candidates, second_candidates)
    else:
        eos = model.generation_config.eos_token_id
        eos = torch.tensor([] if eos is None else [eos] if isinstance(eos, int) else list(eos), dtype=torch.long)
        _assert_token_by_token_runs_agree(first, second, eos, sampling_seed)
    return first, second


def _tolerance(values: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """What the comparison allows for ``values`` (accumulated over ``steps`` steps for beam scores)."""
    return steps * ATOL + RTOL * values.abs()


def _assert_near_tie(scores: torch.Tensor, chosen: int, instead: int, steps: int, where: str):
    """The two runs chose ``chosen`` and ``instead`` from scores that agree within the tolerance: in the reference
    scores, the two can then be no further apart than their two tolerances."""
    gap = (scores[chosen] - scores[instead]).item()
    allowed = (_tolerance(scores[chosen], steps) + _tolerance(scores[instead], steps)).item()
    assert abs(gap) <= allowed, (
        f"{where}: the runs chose different tokens ({chosen} and {instead}) {gap:.3g} apart in the reference's "
        f"scores: not a near-tie (at most {allowed:.3g} apart), a real difference"
    )


@contextlib.contextmanager
def _recorded_beam_candidates(model):
    """Records, at each beam search step, the accumulated scores (batch, beams x vocabulary) from which beam search
    keeps its best continuations, and how many it keeps; nothing for greedy search or sampling."""
    records = []
    original = model._get_top_k_continuations

    def recording(*args, **kwargs):
        records.append((kwargs["accumulated_log_probs"].clone(), kwargs["beams_to_keep"]))
        return original(*args, **kwargs)

    model._get_top_k_continuations = recording  # on the instance: the class and other models are left alone
    try:
        yield records
    finally:
        del model._get_top_k_continuations


def _picked_tokens(scores: tuple, sampling_seed: int | None) -> torch.Tensor:
    """The tokens (rows, steps) that greedy search or sampling picks from ``scores``: sampling as generate does
    it, one ``multinomial`` draw for all rows per step from the stream seeded with ``sampling_seed``."""
    if sampling_seed is None:
        return torch.stack([step.argmax(-1) for step in scores], dim=1)
    generator_state = torch.get_rng_state()
    torch.manual_seed(sampling_seed)
    try:
        draws = [torch.multinomial(torch.softmax(step, dim=-1), num_samples=1)[:, 0] for step in scores]
    finally:
        torch.set_rng_state(generator_state)
    return torch.stack(draws, dim=1)


def _assert_token_by_token_runs_agree(first, second, eos: torch.Tensor, sampling_seed: int | None):
    prompt = first.sequences.shape[1] - len(first.scores)
    assert second.sequences.shape[1] - len(second.scores) == prompt
    assert torch.equal(first.sequences[:, :prompt], second.sequences[:, :prompt])  # the given decoder prompt
    generated = []
    for output in (first, second):
        # Each run's tokens are the ones picked from its own scores (with the same random draws when sampling);
        # a row that has finished at an EOS gets padding instead.
        tokens = output.sequences[:, prompt:]
        live = torch.isin(tokens, eos).cumsum(1) - torch.isin(tokens, eos).long() == 0
        picked = _picked_tokens(output.scores, sampling_seed)
        assert torch.equal(tokens[live], picked[live]), "a run's tokens are not the ones picked from its scores"
        generated.append((tokens, live))
    (tokens, live), (other_tokens, other_live) = generated
    steps = min(tokens.shape[1], other_tokens.shape[1])
    for row in range(tokens.shape[0]):
        parted = (tokens[row, :steps] != other_tokens[row, :steps]).nonzero()
        last = int(parted[0]) if len(parted) else steps - 1
        for step in range(last + 1):  # the same tokens before this step: the same inputs
            if not live[row, step]:  # finished: the logits after an EOS are computed over padding and unused
                break
            torch.testing.assert_close(
                second.logits[step][row], first.logits[step][row], rtol=RTOL, atol=ATOL, msg=f"row {row} step {step}"
            )
        if len(parted):
            # Greedy: the two tokens are tied to rounding. Sampling: each token is its run's draw (checked above)
            # from the same random numbers and logits equal to rounding: the draw fell within rounding of the
            # boundary between the two tokens, or of the top-k filter's threshold.
            if sampling_seed is None:
                chosen, instead = int(tokens[row, last]), int(other_tokens[row, last])
                _assert_near_tie(first.scores[last][row], chosen, instead, 1, f"row {row} step {last}")
        else:  # the same tokens throughout: where one run went on for longer, the row had finished in both
            assert not live[row, steps:].any() and not other_live[row, steps:].any(), f"row {row} stopped early"


def _assert_beam_searches_agree(first, second, first_candidates, second_candidates):
    batch, beams_to_keep = first_candidates[0][0].shape[0], first_candidates[0][1]
    beams = first.scores[0].shape[0] // batch
    returned = first.sequences.shape[0] // batch
    for item in range(batch):
        rows = slice(item * beams, (item + 1) * beams)
        parted = False
        for step in range(min(len(first_candidates), len(second_candidates))):
            where = f"input {item} step {step}"
            # The same beams so far: the same inputs, so logits and accumulated scores agree to rounding.
            torch.testing.assert_close(
                second.logits[step][rows], first.logits[step][rows], rtol=RTOL, atol=ATOL, msg=where
            )
            reference, other = first_candidates[step][0][item], second_candidates[step][0][item]
            close = (other == reference) | ((other - reference).abs() <= _tolerance(reference, step + 1))
            assert close.all(), f"{where}: the accumulated scores differ"  # (equal: -inf, a token forbidden in both)
            # Beam search keeps the best beams_to_keep continuations, in order: the same ones, or a near-tie.
            kept, other_kept = reference.topk(beams_to_keep).indices, other.topk(beams_to_keep).indices
            if not torch.equal(kept, other_kept):
                rank = int((kept != other_kept).nonzero()[0])
                _assert_near_tie(reference, int(kept[rank]), int(other_kept[rank]), step + 1, where)
                parted = True
                break
            # The same ones in the same order, but two of them (or the last kept and the next) within rounding of
            # each other: the beams may still be kept in another order, or one swapped for the next, from here on.
            best = reference.topk(beams_to_keep + 1).values
            gaps = best[:-1] - best[1:]
            if (gaps <= _tolerance(best[:-1], step + 1) + _tolerance(best[1:], step + 1)).any():
                parted = True
                break
        if not parted:  # the same choices at every step: the same hypotheses, scored alike
            hypotheses = slice(item * returned, (item + 1) * returned)
            lengths = first.beam_indices[hypotheses].ne(-1).sum(1)
            assert torch.equal(lengths, second.beam_indices[hypotheses].ne(-1).sum(1)), f"input {item}: lengths"
            prompt = first.sequences.shape[1] - first.beam_indices.shape[1]
            for row, length in zip(range(hypotheses.start, hypotheses.stop), lengths.tolist()):
                assert torch.equal(first.sequences[row, : prompt + length], second.sequences[row, : prompt + length])
            torch.testing.assert_close(
                second.sequences_scores[hypotheses], first.sequences_scores[hypotheses], rtol=RTOL, atol=ATOL
            )
