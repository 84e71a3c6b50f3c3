"""experiments.snr: the U-statistic SNR and its jackknife against Gaussian vectors of known mean and covariance, the
group gradients against the trainer's batch gradient, the partial-credit reward, the command line's refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from experiments import snr
from experiments.partial_credit import PartialCreditTask
from sim.llm.task import EOS, VOCAB, AdditionTask
from sim.llm.train import accumulate_gradient, rollouts, setup


def gaussian_rows(generator: np.random.Generator, reps: int, n: int, mean: np.ndarray, scales: np.ndarray):
    """``reps`` draws of n rows X_i ~ N(mean, diag(scales²))."""
    return mean + scales * generator.standard_normal((reps, n, len(mean)))


def plain_ratio(gram: np.ndarray) -> tuple[float, float, float]:
    """The biased estimate |X̄|² / tr Cov (X̄'s own noise tr Cov / n counted as signal), with the same errors."""
    n = len(gram)
    trace = (np.trace(gram) - gram.sum() / n) / (n - 1)
    return (gram.sum() / n**2 / trace, *snr.snr_ratio(gram)[1:])


def check_estimator(estimator, r_true: float, seed: int = 0, reps: int = 300, n: int = 120, d: int = 200):
    """Over ``reps`` independent batches of n Gaussian rows with a known r: the mean estimate lies within 4 standard
    errors of its mean (the spread across batches / √reps) of r; each batch's estimate within 3.5 of its own
    standard errors of r, for all but 1 %; the mean U-statistic error within 12 % of the spread across batches, the
    mean jackknife error at or above 0.9 of it and at most √2 + 10 % (conservative where the signal is small)."""
    generator = np.random.default_rng(seed)
    scales = np.linspace(0.5, 2.0, d)  # anisotropic: tr Σ = Σ scales²
    direction = generator.standard_normal(d)
    mean = direction / np.linalg.norm(direction) * math.sqrt(r_true * (scales**2).sum())
    rows = gaussian_rows(generator, reps, n, mean, scales)
    estimates = np.array([estimator(x @ x.T) for x in rows])
    values, jackknife, unbiased = estimates.T
    spread = values.std(ddof=1)
    assert abs(values.mean() - r_true) < 4 * spread / math.sqrt(reps), (values.mean(), r_true, spread)
    for errors in (jackknife, unbiased):
        assert (np.abs(values - r_true) < 4 * errors).mean() >= 0.99
    assert unbiased.mean() == pytest.approx(spread, rel=0.12)
    assert 0.9 * spread < jackknife.mean() < 1.1 * math.sqrt(2) * spread
    return jackknife.mean() / spread


def test_snr_ratio_is_unbiased_and_its_errors_match_the_spread():
    """Unbiased from no signal to a strong one; the jackknife is close to the spread where r·n is large, and
    conservative (near √2) where there is no signal."""
    excess = {r_true: check_estimator(snr.snr_ratio, r_true) for r_true in (0.0, 0.02, 0.3)}
    assert excess[0.3] == pytest.approx(1.0, abs=0.1)
    assert excess[0.0] > 1.25


def test_the_check_fails_for_the_plain_squared_mean():
    """|X̄|² over-counts tr Cov / n: at r = 0.02 and n = 120 that is r + 1/120, many standard errors off."""
    with pytest.raises(AssertionError):
        check_estimator(plain_ratio, 0.02)


def test_u_statistic_variance_equals_the_brute_force_hoeffding_terms():
    """Var(U − rV) from ``snr_ratio`` against ζ1, ζ2 and θ² averaged over every explicit triple, pair and quadruple
    of distinct rows (the delta-method error is √Var / tr Cov)."""
    generator = np.random.default_rng(4)
    x = generator.standard_normal((7, 3)) + 0.4
    gram, n = x @ x.T, 7
    r, _, se = snr.snr_ratio(gram)
    h = lambda i, j: (1 + r) * gram[i, j] - r * (gram[i, i] + gram[j, j]) / 2  # noqa: E731
    distinct = lambda k: [c for c in itertools.product(range(n), repeat=k) if len(set(c)) == k]  # noqa: E731
    theta2 = np.mean([h(i, j) * h(k, m) for i, j, k, m in distinct(4)])
    zeta1 = np.mean([h(i, j) * h(i, k) for i, j, k in distinct(3)]) - theta2
    zeta2 = np.mean([h(i, j) ** 2 for i, j in distinct(2)]) - theta2
    trace = np.sum(x.var(0, ddof=1))
    variance = (4 * (n - 2) * zeta1 + 2 * zeta2) / (n * (n - 1))
    assert se == pytest.approx(math.sqrt(max(variance, 0)) / trace, rel=1e-9)
    assert variance > 0


def test_jackknife_from_the_gram_matrix_equals_leaving_each_row_out_of_the_vectors():
    generator = np.random.default_rng(3)
    x = generator.standard_normal((9, 5)) + 0.7
    left_out = []
    for j in range(len(x)):  # recompute from the vectors: mean, sample covariance's trace, U-statistic
        rest = np.delete(x, j, axis=0)
        m = len(rest)
        mean_sq = (np.sum(rest.sum(0) ** 2) - np.sum(rest**2)) / (m * (m - 1))
        left_out.append(mean_sq / np.sum(rest.var(0, ddof=1)))
    left_out = np.array(left_out)
    full = ((np.sum(x.sum(0) ** 2) - np.sum(x**2)) / (9 * 8)) / np.sum(x.var(0, ddof=1))
    r, se, _ = snr.snr_ratio(x @ x.T)
    assert r == pytest.approx(full, rel=1e-12)
    assert se == pytest.approx(math.sqrt(8 / 9 * np.sum((left_out - left_out.mean()) ** 2)), rel=1e-10)


def test_snr_ratio_nan_without_spread_or_rows():
    assert all(math.isnan(v) for v in snr.snr_ratio(np.zeros((5, 5))))
    assert math.isnan(snr.snr_ratio(np.ones((3, 3)))[0])


def test_gram_matrix_of_chunks_equals_the_product_of_the_stacked_rows():
    generator = torch.Generator().manual_seed(0)
    chunks = [torch.randn(k, 30, generator=generator) for k in (3, 1, 5)]
    x = torch.cat(chunks).double()
    exact = (x @ x.T).numpy()
    for slab in (7, 30, 8192):  # several slabs, one exactly, one wider than the rows: float32 products of 30 terms
        np.testing.assert_allclose(snr.gram_matrix(chunks, slab), exact, rtol=0, atol=1e-6 * exact.max())


def test_tied_groups_count_as_zero_rows_and_the_untied_estimate_drops_them():
    """snr_row: r over every group equals the estimator on the Gram matrix with zero rows for the tied groups, r over
    the untied ones the estimator on theirs; both per sample (÷ G); the samples for SNR 1 and 4 are 1/r and 4/r.
    Over batches the mixture's r matches its known value (1 − f)²|μ|² / ((1 − f) tr Σ + f (1 − f) |μ|²)."""
    generator = np.random.default_rng(1)
    n, d, f, group = 200, 20, 0.6, 8
    mean = np.full(d, math.sqrt(0.1))  # |μ|² = 0.1 d = 0.1 tr Σ with Σ = I
    values = []
    for _ in range(200):
        tied = generator.random(n) < f
        x = mean + generator.standard_normal((int((~tied).sum()), d))
        row = snr.snr_row({"gram": x @ x.T, "tied": tied, "mean_tokens": 5.0, "mean_reward": 0.5,
                           "warm_accuracy": 0.2,
                           "cpu": dict(generate=2.0, backward_tied=1.0, backward_untied=1.0, per_group=3.0)}, group)
        full = np.zeros((n, d))
        full[~tied] = x
        assert row["r_sample"] == pytest.approx(snr.snr_ratio(full @ full.T)[0] / group, rel=1e-12)
        assert row["r_untied_sample"] == pytest.approx(snr.snr_ratio(x @ x.T)[0] / group, rel=1e-12)
        assert row["samples_snr4"] == pytest.approx(4 / row["r_sample"])
        assert row["samples_snr1_untied"] == pytest.approx(1 / row["r_untied_sample"])
        assert row["tied_frac"] == pytest.approx(tied.mean())
        assert row["cpu_s_per_sample"] == pytest.approx(4.0 / (n * group))
        values.append(row["r_sample"] * group)
    mu2, trace = 0.1 * d, float(d)
    expected = (1 - f) ** 2 * mu2 / ((1 - f) * trace + f * (1 - f) * mu2)
    assert np.mean(values) == pytest.approx(expected, abs=4 * np.std(values) / math.sqrt(len(values)))


def test_group_gradients_average_to_the_trainers_batch_gradient(tiny_args):
    """X̄ = the trainer's gradient of the whole batch (its token mean): |X̄|² = 1ᵀK1/n² equals |g_batch|² (fails if
    a group's own token mean were taken as X_i, groups' lengths differing); a tied group's gradient is 0."""
    args = tiny_args(prompts_per_step=12, group_size=4, temperature=2.0, method="sync", minibatches=1)
    measured = snr.group_gradients(args, groups=12, log=lambda *_: None)
    run = setup(args, lambda *_: None)
    data = rollouts(run, run.model)  # the same generator seed: the same batch
    tokens = data["mask"].view(12, -1).sum(1)
    assert tokens.min() < tokens.max()  # lengths differ, so the normalisation matters
    run.optimizer.zero_grad(set_to_none=True)
    accumulate_gradient(run, data, torch.arange(48))
    batch = torch.cat([p.grad.reshape(-1) for p in run.params]).double()
    n = len(measured["tied"])
    assert measured["gram"].sum() / n**2 == pytest.approx(float(batch @ batch), rel=1e-5)
    tied = np.flatnonzero(measured["tied"])
    assert 0 < len(tied) < n
    run.optimizer.zero_grad(set_to_none=True)
    accumulate_gradient(run, data, torch.arange(4) + 4 * int(tied[0]))
    assert all(p.grad is None or not p.grad.any() for p in run.params)
    row = snr.snr_row(measured, 4)
    assert row["tied_frac"] == pytest.approx(len(tied) / n) and row["samples"] == 48
    assert row["cpu_generate_s"] > 0 and row["cpu_backward_s"] > 0


def test_partial_credit_is_the_share_of_right_answer_tokens():
    task = PartialCreditTask(digits=2)
    ids = lambda text: [VOCAB.index(c) if c != "$" else EOS for c in text]  # noqa: E731
    operands = torch.tensor([[12, 34]] * 4)  # 46: tokens 4, 6, EOS
    responses = torch.tensor([ids("46$0"), ids("47$0"), ids("4611"), ids("9$00")])
    assert task.verify(operands, responses).tolist() == pytest.approx([1.0, 2 / 3, 2 / 3, 0.0])
    assert AdditionTask(digits=2).verify(operands, responses).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_merge_replaces_a_measurement_with_the_same_key(tmp_path):
    key = dict(warm_seed=1, digits=2, group_size=8, reward="exact", groups=256, seed=0)
    path = tmp_path / "snr.csv"
    snr.merge(path, [{**key, "r_sample": 1.0}, {**key, "warm_seed": 2, "r_sample": 2.0}]).to_csv(path, index=False)
    table = snr.merge(path, [{**key, "r_sample": 3.0}])
    assert table.r_sample.tolist() == [3.0, 2.0] and table.warm_seed.tolist() == [1, 2]


@pytest.mark.parametrize("argv, message", [
    (["out.txt"], ".csv"), (["OUT.csv", "--groups", "2"], "--groups"), (["OUT.csv", "--chunk", "0"], "--chunk"),
    (["OUT.csv", "--digits", "9"], "digits"), (["OUT.csv", "--group-size", "1"], "--group-size"),
    (["no/such/folder/x.csv"], "does not exist")])
def test_command_line_refuses_bad_input_before_work(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert snr.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_figure_draws_n_times_the_mean_r_and_the_cosine_cap(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from paper_figs import llm_snr

    table = pd.DataFrame({"warm_seed": [1, 2], "digits": 2, "group_size": 8, "reward": "exact",
                          "r_sample": [1e-3, 3e-3], "r_untied_sample": [4e-3, 8e-3]})
    drawn = {}
    monkeypatch.setattr("paper_figs.common.save_figure", lambda fig, out, name: drawn.setdefault("fig", fig) and [])
    llm_snr.draw(table, tmp_path)
    assert len(drawn["fig"].axes) >= 1
    lines = {line.get_label(): line for line in drawn["fig"].axes[0].get_lines()}
    every = lines["2 digits, $G$ = 8: $r$ = 0.002"]
    dropped = next(line for label, line in lines.items() if "tied groups dropped" in label)
    np.testing.assert_allclose(every.get_ydata() / every.get_xdata(), 2e-3)
    np.testing.assert_allclose(dropped.get_ydata() / dropped.get_xdata(), 6e-3)
    assert llm_snr.cap(1.0) == 0.5 and llm_snr.cap(4.0) == pytest.approx(0.8)
    plt.close(drawn["fig"])


def test_command_line_writes_a_row_per_warm_start_and_goes_on_past_a_refused_one(tmp_path, monkeypatch, capsys):
    from sim.llm.warmstart import WarmStartRejected

    generator = np.random.default_rng(2)
    x = generator.standard_normal((6, 5)) + 0.5

    def measured(args, groups, reward, log):
        if args.warm_seed == 1:
            raise WarmStartRejected("warm start small d2 seed 1 refused: held-out accuracy 0.010 in 10 attempts")
        return {"gram": x @ x.T, "tied": np.array([False] * 6 + [True] * 4), "mean_tokens": 5.0,
                "mean_reward": 0.3, "warm_accuracy": 0.25,
                "cpu": dict(generate=1.0, backward_tied=1.0, backward_untied=1.0, per_group=1.0)}

    monkeypatch.setattr(snr, "group_gradients", measured)
    out = tmp_path / "snr.csv"
    assert snr.main([str(out), "--warm-seeds", "1", "2", "--groups", "10"]) == 1
    assert "error: warm start small d2 seed 1 refused" in capsys.readouterr().err
    table = pd.read_csv(out)
    assert table.warm_seed.tolist() == [2] and table.tied_frac.tolist() == [0.4]
    assert table.r_untied_sample[0] == pytest.approx(snr.snr_ratio(x @ x.T)[0] / 8)
    assert table.command[0] == f"python -m experiments.snr {out} --warm-seeds 1 2 --groups 10"
