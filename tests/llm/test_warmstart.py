"""The warm start's rules: a plateau stop, an acceptance check that retrains or refuses, distinct evaluation problems,
one metric before and after RL. The rules are tested on scripted accuracies, so no test depends on where a
supervised run's float bits happen to land."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sim.llm import warmstart
from sim.llm.task import AdditionTask
from sim.llm.train import Args, run_records

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(size="tiny", digits=1, batch_size=4, eval_every=1, eval_problems=4, lr=1e-3)


def scripted(monkeypatch, accuracies):
    """Held-out checks return ``accuracies`` in turn (then the last one forever); returns the list of calls."""
    calls = []

    def fake(model, task, operands):
        calls.append(len(operands))
        return accuracies[min(len(calls), len(accuracies)) - 1]

    monkeypatch.setattr(warmstart, "heldout_accuracy", fake)
    return calls


def test_the_plateau_rule_stops_after_patience_checks_without_improvement(monkeypatch):
    # improvements of >= min_delta at checks 1..4, then nothing that beats the best by 0.01
    scripted(monkeypatch, [0.1, 0.2, 0.3, 0.4, 0.405, 0.39, 0.409, 0.4, 0.41, 0.5])
    cfg = warmstart.WarmStartConfig(**FAST, min_steps=2, patience=4, min_delta=0.01, max_steps=50)
    _, info = warmstart.train_attempt(cfg, seed=0)
    assert info["stopped"] == "plateau" and info["steps"] == 8  # best at check 4, four checks without: 5..8
    assert info["heldout_accuracy"] == 0.4 and info["history"] == [0.1, 0.2, 0.3, 0.4, 0.405, 0.39, 0.409, 0.4]


def test_no_plateau_stop_before_min_steps(monkeypatch):
    scripted(monkeypatch, [0.3])  # flat from the first check
    cfg = warmstart.WarmStartConfig(**FAST, min_steps=9, patience=2, max_steps=50)
    _, info = warmstart.train_attempt(cfg, seed=0)
    assert info["stopped"] == "plateau" and info["steps"] == 9


def test_max_steps_ends_a_run_that_keeps_improving(monkeypatch):
    scripted(monkeypatch, [0.1 * k for k in range(1, 20)])
    cfg = warmstart.WarmStartConfig(**FAST, min_steps=0, patience=2, max_steps=5)
    _, info = warmstart.train_attempt(cfg, seed=0)
    assert info["stopped"] == "max_steps" and info["steps"] == 5 and info["heldout_accuracy"] == pytest.approx(0.5)


def test_a_warm_start_below_target_is_retrained_from_the_next_seed_then_accepted(monkeypatch):
    outcomes = iter([0.05, 0.31])
    seeds = []

    def attempt(cfg, seed, device="cpu", log=print):
        seeds.append(seed)
        return torch.nn.Linear(1, 1), {"heldout_accuracy": next(outcomes), "steps": 3}

    monkeypatch.setattr(warmstart, "train_attempt", attempt)
    cfg = warmstart.WarmStartConfig(**FAST, seed=7, target_accuracy=0.3)
    _, info = warmstart.train_warm_start(cfg, log=lambda *a: None)
    assert seeds == [7, 7 + warmstart.ATTEMPT_STRIDE]
    assert info["accepted"] and info["attempt"] == 1 and info["attempt_accuracies"] == [0.05, 0.31]


def test_a_warm_start_that_never_reaches_its_target_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(warmstart, "RUNS_DIR", tmp_path)
    monkeypatch.setattr(warmstart, "train_attempt",
                        lambda cfg, seed, device="cpu", log=print: (None, {"heldout_accuracy": 0.1, "steps": 3}))
    cfg = warmstart.WarmStartConfig(**FAST, seed=3, target_accuracy=0.3, attempts=2)
    with pytest.raises(warmstart.WarmStartRejected) as err:
        warmstart.warm_start(cfg, log=lambda *a: None)
    message = str(err.value)
    assert "\n" not in message and "seed 3" in message and "0.100, 0.100" in message and "0.3" in message
    assert not any(p.name.startswith("tiny") for p in (tmp_path / "warmstart").iterdir())  # nothing cached


def test_heldout_and_train_sets_are_distinct_fixed_and_in_their_split():
    for digits, available in ((2, 997), (4, 1000)):  # 2 digits: the whole held-out split is 997 problems
        task = AdditionTask(digits=digits)
        held = task.heldout_set(1000)
        assert len(held) == available and len(torch.unique(held, dim=0)) == available
        assert task.is_heldout(held[:, 0], held[:, 1]).all() and torch.equal(held, task.heldout_set(1000))
        assert torch.equal(task.heldout_set(10), held[:10])  # a smaller set is the first n of the same problems
        train = task.distinct_pairs(500, 3, heldout=False)
        assert len(torch.unique(train, dim=0)) == 500 and not task.is_heldout(train[:, 0], train[:, 1]).any()
        assert not torch.equal(train, task.distinct_pairs(500, 4, heldout=False))
    assert len(AdditionTask(digits=1).heldout_set(1000)) == 12  # the whole 1-digit held-out split


def test_warm_start_and_rl_measure_the_same_accuracy(tmp_path, monkeypatch):
    # the run's first evaluation (step 0, before any update) is the warm start's own number: same problems, greedy
    monkeypatch.setattr(warmstart, "RUNS_DIR", tmp_path / "runs")
    torch.set_num_threads(1)
    args = Args(size="tiny", digits=1, warm_target=0.0, warm_ceiling=1.0, warm_max_steps=30, warm_sft_problems=50,
                steps=1, prompts_per_step=2, group_size=2, eval_every=1, progress=False, out_dir=str(tmp_path / "run"))
    result = run_records(args, log=lambda *a: None)
    assert result["records"][0]["accuracy"] == result["summary"]["warm_start"]["heldout_accuracy"]


def test_bad_warm_start_settings_fail_in_one_line_before_training(tmp_path):
    with pytest.raises(ValueError, match="target_accuracy must be in"):
        Args(warm_target=1.5).validate()
    with pytest.raises(ValueError, match="sft_problems must be >= 1"):
        Args(warm_sft_problems=0).validate()
    done = subprocess.run([sys.executable, "-m", "sim.llm.warmstart", "--out", str(tmp_path / "w"),
                           "--config.patience", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "patience" in done.stderr
    assert not (tmp_path / "w").exists()


def test_the_committed_tiny_warm_start_names_the_command_that_made_it():
    meta = json.loads((ROOT / "tests" / "data" / "tiny_warm_start" / "warmstart.json").read_text())
    assert meta["command"].startswith("python -m sim.llm.warmstart --out tests/data/tiny_warm_start")
    assert meta["config"]["size"] == "tiny" and meta["info"]["accepted"] and len(meta["code_fingerprint"]) == 16


def test_the_figures_bound_and_intervals_against_direct_computations():
    import math

    import pandas as pd
    from scipy import stats

    from experiments import llm_figures

    for c in (0.05, 0.3, 0.8):  # SNR = 2c/(1 − c) for the whole batch, so SNR/(1+SNR) = 2c/(1+c)
        assert llm_figures.snr_bound(c) == pytest.approx(2 * c / (1 + c), rel=1e-12)
    assert math.isnan(llm_figures.snr_bound(-0.1)) and math.isnan(llm_figures.snr_bound(float("nan")))
    values = pd.Series([0.1, 0.3, 0.2, 0.6, 0.5, 0.5])
    warm = pd.Series([1, 1, 2, 2, 3, 3])
    mean, low, high = llm_figures.over_warm_starts(values, warm)
    means = [0.2, 0.4, 0.5]  # each warm start's seed mean first: the warm start is the unit
    expected = stats.t.interval(0.95, 2, loc=sum(means) / 3, scale=stats.sem(means))
    assert mean == pytest.approx(sum(means) / 3) and (low, high) == pytest.approx(expected)
    rows = [{"arm": "sync", "step": step, "warm_seed": w, "seed": s, "cos_prev": v, "diverged": False}
            for step in (0, 1) for (w, s, v) in zip(warm, range(6), values, strict=True)]
    steps, band_mean, band_low, band_high = llm_figures.band(rows, "cos_prev", "sync")
    assert list(steps) == [0, 1] and band_mean == pytest.approx([mean, mean])
    assert band_low == pytest.approx([low, low]) and band_high == pytest.approx([high, high])


def test_the_log_band_is_geometric_and_the_bound_is_taken_at_the_mean_snr():
    import math

    from scipy import stats

    from experiments import llm_figures

    norms = {1: [1.0, 4.0], 2: [0.01, 0.01], 3: [100.0, 1.0]}  # warm seed -> its two seeds' gradient norms
    rows = [{"arm": "naive", "step": 5, "warm_seed": w, "seed": i, "grad_norm": v, "diverged": False}
            for w, vs in norms.items() for i, v in enumerate(vs)]
    logs = [sum(map(math.log, vs)) / 2 for vs in norms.values()]  # each warm start's mean log norm
    low, high = stats.t.interval(0.95, 2, loc=sum(logs) / 3, scale=stats.sem(logs))
    _, mean, band_low, band_high = llm_figures.band(rows, "grad_norm", "naive", log=True)
    assert mean == pytest.approx([math.exp(sum(logs) / 3)]) and band_low[0] > 0
    assert (band_low[0], band_high[0]) == pytest.approx((math.exp(low), math.exp(high)))
    assert llm_figures.band(rows, "grad_norm", "naive")[2][0] < 0  # the arithmetic band crosses 0 here
    probes = [{"staleness": s, "cos_halves": c} for s, c in ((2, 0.3), (2, -0.1), (16, 0.1), (0, 0.9))]
    halves, bound = llm_figures.mean_bound(probes, [2, 16])
    assert halves == pytest.approx(0.1) and bound == pytest.approx(2 * 0.1 / 1.1)  # not the mean of 0.46 and 0.18
    assert llm_figures.mean_bound([{"staleness": 2, "cos_halves": -0.02}]) == (-0.02, 0.0)


def test_paired_summary_against_a_direct_computation():
    import pandas as pd
    from scipy import stats

    from experiments import llm_figures

    rows = []
    for warm, base in ((1, 0.2), (2, 0.5), (3, 0.3)):  # warm starts far apart: the pairing must remove that
        for seed, noise in ((0, 0.01), (1, -0.01)):
            for arm, effect in (("sync", 0.0), ("naive s=16", -0.05 - 0.01 * warm)):
                rows.append({"arm": arm, "warm_seed": warm, "seed": seed, "final_accuracy": base + effect + noise,
                             "gain": 0.1 + effect, "cos_prev": 0.0, "cos_bound": 0.1, "kl_behaviour": 0.0})
    summary = llm_figures.paired_summary(pd.DataFrame(rows)).set_index("arm")
    diffs = [-0.06, -0.07, -0.08]  # each warm start's naive − sync (the seed noise is shared, so it cancels)
    low, high = stats.t.interval(0.95, 2, loc=-0.07, scale=stats.sem(diffs))
    naive = summary.loc["naive s=16"]
    assert naive.minus_sync == pytest.approx(-0.07) and (naive.minus_sync_low, naive.minus_sync_high) == pytest.approx(
        (low, high))
    assert summary.loc["sync"].minus_sync == 0 and naive.runs == 6 and naive.warm_starts == 3
