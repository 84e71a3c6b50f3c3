"""Early warning (fig9): which per-step signal predicts a collapse within the next k steps.

Pure functions over record rows (the ``sim.schema`` columns) grouped into runs: each run's collapse step,
each step's label, and per signal and horizon k the ROC AUC, the precision and the median lead time of an
alarm set at a 10% false-alarm rate.

Collapse (the first step at which it holds; steps from it on are excluded from scoring):

- LLM: the held-out accuracy of an evaluation is < 0.5 × the best accuracy of the run's earlier
  evaluations, or the run diverged (non-finite). Evaluations come every ``eval_every`` steps plus one
  after the last step, so a collapse is located to the evaluation that first sees it (the onset may lie up
  to ``eval_every`` steps earlier: for k < eval_every the positives are the k steps before that evaluation).
- Toys: the run's loss (quadratic: ``objective``; bandits: ``reward_gap`` = J* − J) is ≥ 10 × its own best loss so far
  AND ≥ 10 × sync's loss at the same step (same problem, step size and seed), or the run diverged. The condition on
  the run's own best makes it the toys' analogue of the LLM definition (a fall from the run's best): "≥ 10 × sync"
  alone also fires on runs that merely converge slower.

Labels: a step t (before the run's collapse c) is positive for horizon k when c − k ≤ t < c, i.e. the
collapse comes within the next k steps; every other step before c, and every step of a run without a
collapse, is negative. Steps are the record steps: the toys record every 5 steps.

Direction, fixed in advance for every signal: a higher value is the warning (``ess_drop`` = 1 − ess_ratio); an AUC
below 0.5 means the signal moves the other way before a collapse; it is not flipped.

Statistics pool every scored step of every run of one simulator (``auc_collapsing_runs``: of the collapsing runs
only). AUC = U / (n₊ n₋), U the Mann–Whitney statistic (ties count one half). The alarm threshold is the 90th
percentile of the signal over the negative steps; precision = alarmed positives / alarmed steps; the lead time of a
collapse at c is c − the earliest alarmed step in [c − k, c) (0 for a missed collapse), its median over collapses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from experiments.aggregate import measured
from sim.schema import COLLAPSE_FRACTION, collapse_step, make_row, nonfinite

SIGNALS: dict[str, str] = {
    "cos_prev": "cos of consecutive raw gradients",
    "cos_update": "cos of consecutive applied parameter updates (LLM only: the toys do not record it)",
    "cos_excess": "SNR-normalised cosine cos_prev − SNR/(1+SNR), SNR from the latest SNR probe (LLM only)",
    "kl_behaviour": "KL(π_behaviour ‖ π_θ) (bandits, LLM)",
    "grad_norm": "‖g_t‖ of the raw gradient",
    "clip_frac": "share of clipped tokens (LLM only)",
    "entropy": "mean policy entropy (bandits, LLM)",
    "ess_drop": "1 − ESS/N of the update's importance weights π_θ/π_b (bandits, LLM; from the rows' ess_ratio): the "
                "share of the batch the stale data no longer carries (VCPO's warning: collapse follows an ESS drop)",
    "staleness": "the run's staleness s: known before training, the baseline a signal has to beat",
}
"""The candidate signals, each read as: higher = warning."""

HORIZONS = (5, 10, 20)
FALSE_ALARM_RATE = 0.10
TOY_COLLAPSE_FACTOR = 10.0
LLM_COLLAPSE_FRACTION = COLLAPSE_FRACTION
TOY_LOSS = {"quadratic": "objective", "bandit_gaussian": "reward_gap", "bandit_softmax": "reward_gap",
            "bandit_contextual": "reward_gap"}
"""The lower-is-better column of each toy simulator that the collapse definition compares."""


def check_request(signals: Sequence[str], horizons: Sequence[int]) -> None:
    """ValueError, with one line saying what is wrong, for an unknown signal or a horizon that is not an int ≥ 1."""
    unknown = [s for s in signals if s not in SIGNALS]
    if unknown or not signals:
        raise ValueError(f"unknown signal(s) {unknown or '(none given)'}; choose from {', '.join(SIGNALS)}")
    bad = [k for k in horizons if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1]
    if bad or not horizons:
        raise ValueError(f"horizons k must be integers >= 1, got {list(horizons)}")


def run_key(row: dict) -> tuple:
    """The run a row belongs to: (sim, label, staleness, lr, seed, ratio_to)."""
    return (row["sim"], row.get("label") or row["method"], row["staleness"], row.get("lr"), row["seed"],
            row.get("ratio_to") or "")


def split_runs(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    """Rows grouped by run and sorted by step; a step seen twice (one run cached by two figures) is kept once."""
    runs: dict[tuple, dict] = {}
    for row in rows:
        runs.setdefault(run_key(row), {}).setdefault(row["step"], row)
    return {key: [by_step[s] for s in sorted(by_step)] for key, by_step in runs.items()}


def llm_collapse_step(run: list[dict]) -> float | None:
    """Step of the first evaluation at which the run collapsed (``sim.schema.collapse_step``: held-out accuracy
    below COLLAPSE_FRACTION × the best before it), or of its non-finite step, whichever comes first; None when
    neither happens."""
    bad = next((row["step"] for row in run if nonfinite(row)), None)
    collapsed = collapse_step([(row["step"], row["accuracy"]) for row in run if measured(row.get("accuracy"))
                               and (bad is None or row["step"] < bad)])
    return bad if collapsed is None else collapsed


def toy_collapse_step(run: list[dict], sync_run: list[dict], factor: float = TOY_COLLAPSE_FACTOR) -> float | None:
    """Step of the first record whose loss is ≥ ``factor`` × the run's best loss so far and ≥ ``factor`` × sync's
    loss at that step, or of the first diverged (or non-finite) record; None when neither happens."""
    column = TOY_LOSS[run[0]["sim"]]
    sync = {row["step"]: row[column] for row in sync_run}
    best = math.inf
    for row in run:
        loss = row[column]
        if nonfinite(row) or not math.isfinite(loss):
            return row["step"]
        best = min(best, loss)
        if row["step"] in sync and loss >= factor * best and loss >= factor * sync[row["step"]]:
            return row["step"]
    return None


def collapse_steps(runs: dict[tuple, list[dict]]) -> dict[tuple, float | None]:
    """Each run's collapse step (None: no collapse); a toy run is compared with the sync run of its setting."""
    out = {}
    for key, run in runs.items():
        sim, _, _, lr, seed, ratio_to = key
        if sim == "llm":
            out[key] = llm_collapse_step(run)
            continue
        sync_key = (sim, "sync", 0, lr, seed, ratio_to)
        if sync_key not in runs:
            raise ValueError(f"toy run {key} has no sync run {sync_key} to compare with")
        out[key] = toy_collapse_step(run, runs[sync_key])
    return out


def _column(run: list[dict], name: str) -> np.ndarray:
    return np.array([float(row[name]) if measured(row.get(name)) else math.nan for row in run])


def signal_values(run: list[dict], name: str) -> np.ndarray:
    """The signal ``name`` at each row of ``run`` (NaN where not measured).

    ``ess_drop`` = 1 − ess_ratio (the rows record ESS/N, where lower is the warning; the signal turns it round).
    ``cos_excess`` = cos_prev − SNR/(1+SNR) with SNR = snr_halves = c/(1 − c) of the latest probe's halves
    cosine c, carried forward (never from a later step): SNR/(1+SNR) is then c itself, and 0 where the
    halves show no signal (c ≤ 0, where snr_halves is NaN). NaN before the first probe.
    """
    if name == "ess_drop":
        return 1.0 - _column(run, "ess_ratio")
    if name != "cos_excess":
        return _column(run, name)
    halves = _column(run, "cos_halves")
    probed = np.where(~np.isnan(halves), np.arange(len(halves)), -1)
    latest = np.maximum.accumulate(probed) if len(probed) else probed
    noise_level = np.where(latest >= 0, np.clip(halves[np.maximum(latest, 0)], 0.0, 1.0), math.nan)
    return _column(run, "cos_prev") - noise_level


def step_labels(steps: np.ndarray, collapse: float | None, horizon: int) -> np.ndarray:
    """1 where the collapse comes within the next ``horizon`` steps (c − k ≤ t < c), 0 for other steps before it
    (all steps of a run without collapse), NaN from the collapse on (excluded)."""
    steps = np.asarray(steps, dtype=float)
    if collapse is None:
        return np.zeros(len(steps))
    positive = (steps >= collapse - horizon) & (steps < collapse)
    return np.where(steps >= collapse, math.nan, positive.astype(float))


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ½ P(tie), from scipy's Mann–Whitney U; NaN without both."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    positives, negatives = scores[labels == 1], scores[labels == 0]
    if not len(positives) or not len(negatives):
        return math.nan
    from scipy.stats import mannwhitneyu  # here, not at import: scipy.stats is slow to import

    u = mannwhitneyu(positives, negatives, alternative="greater").statistic
    return float(u) / (len(positives) * len(negatives))


def lead_time(steps: np.ndarray, values: np.ndarray, collapse: float, threshold: float, horizon: int) -> float:
    """c − the earliest step in [c − k, c) whose value is > ``threshold``; 0 if none alarms (a missed collapse)."""
    steps = np.asarray(steps, dtype=float)
    alarmed = (steps >= collapse - horizon) & (steps < collapse) & (np.asarray(values) > threshold)
    return float(collapse - steps[alarmed].min()) if alarmed.any() else 0.0


def score_signal(runs: dict[tuple, list[dict]], collapses: dict[tuple, float | None], name: str,
                 horizon: int) -> dict:
    """AUC, the 10%-false-alarm threshold, its precision and achieved false-alarm rate, the share of collapses
    it detects and the median lead time, for signal ``name`` and horizon k over the steps of ``runs``.

    ``auc_collapsing_runs`` is the AUC over the steps of the runs that collapse only: whether the signal rises
    as the collapse nears within those runs, where the pooled AUC also credits a signal that merely separates
    the runs (e.g. by their staleness)."""
    series = []  # (steps, values, labels, collapse) of each run, the steps where the signal is measured
    for key, run in runs.items():
        steps = np.array([row["step"] for row in run], dtype=float)
        values = signal_values(run, name)
        labels = step_labels(steps, collapses[key], horizon)
        scored = np.array([not row.get("final_eval") for row in run])
        kept = scored & ~np.isnan(values) & ~np.isnan(labels)
        series.append((steps[kept], values[kept], labels[kept], collapses[key]))
    values = np.concatenate([v for _, v, _, _ in series])
    labels = np.concatenate([lab for _, _, lab, _ in series])
    events = [(s, v, c) for s, v, _, c in series if c is not None]
    collapsing = [(v, lab) for _, v, lab, c in series if c is not None]
    out = {"scored_steps": len(values), "positives": int((labels == 1).sum()), "negatives": int((labels == 0).sum()),
           "auc": roc_auc(values, labels),
           "auc_collapsing_runs": roc_auc(np.concatenate([v for v, _ in collapsing] or [[]]),
                                          np.concatenate([lab for _, lab in collapsing] or [[]]))}
    negatives = values[labels == 0]
    if not len(negatives) or not out["positives"]:
        return {**out, "threshold": math.nan, "false_alarm_rate": math.nan, "precision": math.nan,
                "detected": math.nan, "median_lead": math.nan}
    threshold = float(np.quantile(negatives, 1 - FALSE_ALARM_RATE))
    alarms = values > threshold
    leads = [lead_time(s, v, c, threshold, horizon) for s, v, c in events]
    return {**out, "threshold": threshold, "false_alarm_rate": float(alarms[labels == 0].mean()),
            "precision": float(alarms[labels == 1].sum() / alarms.sum()) if alarms.any() else math.nan,
            "detected": float(np.mean([lead > 0 for lead in leads])), "median_lead": float(np.median(leads))}


def evaluate(rows: Iterable[dict], signals: Sequence[str] = tuple(SIGNALS),
             horizons: Sequence[int] = HORIZONS) -> tuple[list[dict], list[dict]]:
    """(the table: one row per simulator × signal × k, the collapses: one row per run) over the runs of ``rows``.

    Bad input (an unknown signal, k < 1) raises ValueError before any work.
    """
    check_request(signals, horizons)
    runs = split_runs(rows)
    collapses = collapse_steps(runs)
    table = []
    for sim in dict.fromkeys(key[0] for key in runs):
        mine = {key: run for key, run in runs.items() if key[0] == sim}
        header = {"sim": sim, "runs": len(mine), "collapses": sum(collapses[key] is not None for key in mine)}
        for name in signals:
            for horizon in horizons:
                table.append({**header, "signal": name, "k": horizon, **score_signal(mine, collapses, name, horizon)})
    events = [{"sim": key[0], "label": key[1], "staleness": key[2], "lr": key[3], "seed": key[4], "ratio_to": key[5],
               "last_step": runs[key][-1]["step"], "collapse_step": math.nan if step is None else step}
              for key, step in collapses.items()]
    return table, events


def llm_rows(results) -> list[dict]:
    """Per-step records of every run of an LLM sweep (``experiments.llm.results_of``), each run followed by
    one schema row at step = steps holding only the final policy's held-out accuracy (its last evaluation), marked
    ``final_eval`` (as in ``experiments.llm``): it can be a collapse, but it is not a step whose signals are scored.
    ``lr`` is the run's configured step size on every row (as in fig5), so a run is one key under lr_scale too."""
    rows = []
    for item, result in results:
        a = item.args
        rows += [dict(r, lr=a.lr) for r in result["records"]]
        final = make_row("llm", step=a.steps, seed=a.seed, method=a.run_method, label=a.run_method,
                         staleness=a.staleness, lr=a.lr, ratio_to=a.ratio_to,
                         accuracy=result["summary"]["final_accuracy"],
                         nonfinite=any(nonfinite(r) for r in result["records"]))
        rows.append(dict(final, final_eval=True))
    return rows


__all__ = ["SIGNALS", "HORIZONS", "FALSE_ALARM_RATE", "check_request", "split_runs", "collapse_steps",
           "llm_collapse_step", "toy_collapse_step", "signal_values", "step_labels", "roc_auc", "lead_time",
           "score_signal", "evaluate", "llm_rows"]
