"""experiments.llm_highsnr: its profiles' arms, the batch SNR it reads off the halves' cosine (against a simulated
gradient of known SNR), and its two tables from real tiny runs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from experiments import llm_highsnr as hs
from experiments.llm import Run
from sim.llm.train import Args


def test_fig3_profile_runs_both_ratios_on_four_reported_warm_starts_at_one_step():
    runs = hs.runs("fig3")
    names = [hs.arm_name(r.args.method, r.args.gac_space, r.args.staleness, r.args.ratio_to, r.args.lr) for r in runs]
    assert len(runs) == 4 * 8 and len(set(zip(names, (r.args.warm_seed for r in runs), strict=True))) == len(runs)
    assert {r.args.warm_seed for r in runs} == {1, 2, 3, 4}  # the tuning warm start is never reported
    assert {r.args.lr for r in runs} == {hs.LR, hs.STEPCUT_LR}
    assert [n for n in names[:8] if "step" in n] == ["naive s=16, uncorrected, step 2.5e-4"]
    assert all(r.args.drop_tied_groups and r.args.prompts_per_step * r.args.group_size == 2048 for r in runs)
    assert {(r.args.method, r.args.ratio_to) for r in runs} == {
        ("sync", "behaviour"), ("naive", "behaviour"), ("naive", "proximal"), ("gac", "behaviour"), ("gac", "proximal")}
    full = hs.runs("full")
    assert len(full) == 4 * 2 * (1 + 4 * 2 + 2 * 2 + 1)  # sync, naive s in {2,4,8,16} and GAC in 2 spaces × ratios,
    # and the step-cut control
    assert {r.roles for r in full if r.args.method == "naive" and r.args.staleness == 16 and r.args.lr == hs.LR} == {
        ("fig1", "fig3")}
    tune = hs.runs("tune")
    assert {(r.args.warm_seed, r.args.method) for r in tune} == {(0, "sync")}
    assert sorted(r.args.lr for r in tune) == sorted(hs.TUNE_LRS)
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        hs.runs("nope")
    assert [r.args for r in hs.runs("fig3", (2,))] == [r.args for r in runs if r.args.warm_seed == 2]
    with pytest.raises(ValueError, match="profile fig3 has warm starts 1 2 3 4"):
        hs.runs("fig3", (0,))


def test_batch_snr_from_the_halves_cosine_matches_a_simulated_gradient_of_known_snr():
    """g_i = μ + σ ξ_i over N samples: batch SNR = N |μ|² / (d σ²). The two halves' mean gradients, their cosine's
    mean over draws, and ``batch_snr`` of it must recover it (the mean cosine's bias at this d is under 5 %)."""
    rng = np.random.default_rng(0)
    d, n, sigma = 4000, 256, 1.0
    for target in (0.25, 1.0, 4.0):
        mu = np.full(d, math.sqrt(target * d * sigma**2 / n / d))
        cosines = []
        for _ in range(40):
            half = [mu + sigma * rng.standard_normal((n // 2, d)).mean(0) for _ in range(2)]
            cosines.append(half[0] @ half[1] / np.linalg.norm(half[0]) / np.linalg.norm(half[1]))
        assert hs.batch_snr(float(np.mean(cosines))) == pytest.approx(target, rel=0.1)
    assert math.isnan(hs.batch_snr(-0.1)) and math.isnan(hs.batch_snr(float("nan")))


def test_main_writes_the_runs_and_their_steps_with_provenance(tiny_checkpoint, torch_threads, tmp_path, monkeypatch):
    base = Args(size="tiny", model=str(tiny_checkpoint), digits=1, steps=4, prompts_per_step=4, group_size=4,
                   minibatches=1, micro_batch=8, drop_tied_groups=True, eval_every=2, eval_problems=8, snr_every=1,
                   temperature=2.0, lr=hs.LR, threads=torch_threads, progress=False, on_nonfinite="mark")
    tiny = [Run(replace(base, method="sync"), ("fig3",)),
            Run(replace(base, method="naive", staleness=2, ratio_to="proximal"), ("fig1", "fig3"))]
    monkeypatch.setattr(hs, "runs", lambda profile, warm_seeds=None: tiny)
    table = hs.main(hs.Cli(out=tmp_path / "runs.csv", profile="smoke", jobs=1))
    written = pd.read_csv(tmp_path / "runs.csv")
    steps = pd.read_csv(tmp_path / "runs_steps.csv")
    assert list(written.arm) == ["sync", "naive s=2, uncorrected"] and len(table) == 2
    assert written.code.notna().all() and written.command.str.startswith("python -m experiments.llm_highsnr").all()
    assert len(steps) == 2 * base.steps and set(steps.arm) == set(written.arm)
    assert written.tied_frac.between(0, 1).all() and (written.samples_drawn >= 16).all()
    # the run's SNR is the one its mean halves' cosine implies
    # --cached computes nothing and finds the same runs
    cached = hs.main(hs.Cli(out=tmp_path / "again.csv", profile="smoke", cached=True))
    pd.testing.assert_frame_equal(cached.drop(columns="command"), table.drop(columns="command"))
    expected = [2 * c / (1 - c) if 0 < c < 1 else math.nan for c in written.cos_halves]
    np.testing.assert_allclose(written.snr_batch, expected, rtol=1e-5)  # the CSV keeps 6 significant digits
    # the figures draw from these two CSVs
    from paper_figs import llm_highsnr as figures

    paths = figures.main(figures.Cli(data=str(tmp_path / "runs.csv"), out=str(tmp_path / "figures")))
    assert sorted(p.name for p in paths) == sorted(f"{name}_llm_highsnr.{ext}" for name in ("fig1_cosine",
                                                   "fig3_divergence") for ext in ("png", "pdf"))
