"""figs2_llm_signature: whether staleness raises the consecutive-gradient cosine at LLM scale, one factor of the GRPO
setup varied at a time, beside what it does to the accuracy.

One message, two panels on one x scale, one row per configuration: async at its largest s minus sync, paired by seed,
(a) in the cosine of consecutive RL steps' gradients (the signature), (b) in the final held-out accuracy; each seed a
dot, the mean a bar. The CSVs keep every run (each granularity's cosine, the SNR probe, KL), the per-(configuration, s)
summary with seed-bootstrap intervals and the paired gaps. Runs come from experiments/signature.py (cached with the
other LLM figures) at the full and gpu profiles; the quick profile computes no run: it draws the committed
docs/data/figs2_llm_signature.csv (a full run's NAME.csv) by the same ``draw``, as ``python -m paper_figs.committed
figs2_llm_signature`` does.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from experiments import signature
from experiments.llm import run_unit
from paper_figs import committed
from paper_figs.common import Results, apply_style, save_figure
from runtime.cache import Unit
from runtime.files import write_records

NAME = "figs2_llm_signature"
PANEL_KEYS = (*signature.GRANULARITIES, "final_accuracy")
"""The quantities of the summary table (the CSV column names)."""
CONFIG_WORDS = {"batch": "{} prompts × {} samples per step", "updates": "{} optimizer updates per RL step",
                "ratio": "{} ratio (stale data used as if fresh)", "clip": "gradient-norm clip at {}",
                "digits": "{}-digit addition", "lr": "AdamW step size {}"}


def config_label(config: str) -> str:
    """A configuration ("base" or "factor=level", experiments.signature) in words, for the legend."""
    if config == "base":
        return "base: 1 update per RL step, behaviour ratio"
    factor, _, level = config.partition("=")
    if factor not in CONFIG_WORDS:
        return config
    return CONFIG_WORDS[factor].format(*level.split("x")) if factor == "batch" else CONFIG_WORDS[factor].format(level)


def device_name(device: str) -> str:
    """The device named in the CSV: "cpu", or "cuda (NVIDIA H200)"."""
    return f"{device} ({torch.cuda.get_device_name(device)})" if device.startswith("cuda") else device


def summary_table(rows: list[dict]) -> list[dict]:
    """Per (configuration, s): seed mean and seed-bootstrap interval of each cosine, the SNR and final accuracy."""
    table = []
    for config, s in dict.fromkeys((r["config"], r["staleness"]) for r in rows):
        mine = [r for r in rows if (r["config"], r["staleness"]) == (config, s)]
        row = {"config": config, "staleness": s, "seeds": len(mine)}
        for key in (*PANEL_KEYS, "cos_halves", "snr_halves", "kl_behaviour_mean", "cos_prev_q1", "accuracy_q1"):
            row[key], row[f"{key}_low"], row[f"{key}_high"] = signature.seed_interval([r[key] for r in mine])
        row["snr_reference_cos"] = signature.snr_reference(row["snr_halves"])
        row["diverged"] = sum(r["diverged"] for r in mine)
        table.append(row)
    return table


GAP_KEYS = (*PANEL_KEYS, "kl_behaviour_mean", "cos_prev_q1", "cos_prev_step_q1", "accuracy_q1", "accuracy_q2")


def paired(rows: list[dict]):
    """Per configuration with a stale cell: (configuration, its largest s, {seed: sync row}, {seed: stale row}, the
    seeds both have), sync and async paired by seed."""
    for config in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == config]
        s_max = max(r["staleness"] for r in mine)
        sync = {r["seed"]: r for r in mine if r["staleness"] == 0}
        stale = {r["seed"]: r for r in mine if r["staleness"] == s_max}
        seeds = sorted(set(sync) & set(stale))
        if s_max > 0 and seeds:
            yield config, s_max, sync, stale, seeds


def gaps(rows: list[dict]) -> list[dict]:
    """Per configuration: async at its largest s minus sync, paired by seed, for each of GAP_KEYS (mean over seeds
    and seed-bootstrap interval), with sync's per-half SNR: the numbers behind the hypotheses H1–H4."""
    out = []
    for config, s_max, sync, stale, seeds in paired(rows):
        row = {"config": config, "staleness": s_max, "seeds": len(seeds),
               "sync_snr_halves": signature.seed_interval([sync[k]["snr_halves"] for k in seeds])[0],
               "async_snr_halves": signature.seed_interval([stale[k]["snr_halves"] for k in seeds])[0]}
        for key in GAP_KEYS:
            diff = [stale[k][key] - sync[k][key] for k in seeds]
            row[f"gap_{key}"], row[f"gap_{key}_low"], row[f"gap_{key}_high"] = signature.seed_interval(diff)
        out.append(row)
    return out


SHOWN = (("cos_prev_step", "(a) cosine of consecutive RL steps' gradients"),
         ("final_accuracy", "(b) final held-out accuracy"))
"""The two quantities the figure sets side by side: the signature and the outcome."""


def plot_gaps(axes, rows: list[dict]) -> None:
    """Async at its largest s minus sync, paired by seed, one row per configuration: each seed's difference a dot,
    the mean a bar; both panels on one x scale, so that a gap in one and none in the other can be seen."""
    pairs = list(paired(rows))
    width = max([0.05] + [abs(stale[k][key] - sync[k][key]) for _, _, sync, stale, seeds in pairs
                          for k in seeds for key, _ in SHOWN if math.isfinite(stale[k][key] - sync[k][key])])
    for ax, (key, title) in zip(axes, SHOWN, strict=True):
        for i, (_, _, sync, stale, seeds) in enumerate(pairs):
            diffs = [stale[k][key] - sync[k][key] for k in seeds]
            ax.scatter(diffs, [i] * len(diffs), color="#1f77b4", s=14, alpha=0.7, zorder=3)
            ax.scatter([float(np.mean(diffs))], [i], color="black", marker="|", s=300, lw=2, zorder=4)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set(title=title, xlim=(-1.15 * width, 1.15 * width), ylim=(len(pairs) - 0.5, -0.5),
               xlabel="async − sync, paired by seed")
    axes[0].set_yticks(range(len(pairs)), [f"{config_label(c)}\n(s = {s})" for c, s, *_ in pairs])
    seeds = sorted({len(p[-1]) for p in pairs})
    handles = [plt.Line2D([], [], ls="", marker="o", color="#1f77b4", label="one seed"),
               plt.Line2D([], [], ls="", marker="|", color="black", ms=12, mew=2,
                          label=f"mean over {'/'.join(map(str, seeds))} seeds")]
    axes[0].figure.legend(handles=handles, loc="outside lower center", ncols=2)


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The GRPO runs of the signature map (experiments/signature.py); none at the quick profile, which draws the
    committed docs/data/figs2_llm_signature.csv."""
    if profile == "quick":
        return []
    return [run_unit(r) for r in signature.sweep(profile, device, dry_run)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    if results.profile == "quick":
        return committed.draw_or_say(NAME, out_dir)
    return draw([signature.run_row(item, res, device_name(results.device)) for item, res in results.runs()], out_dir)


def draw(rows: list[dict], out_dir: Path) -> list[Path]:
    """The figure and its CSVs from ``rows`` (one per run, ``signature.run_row``, as the committed
    docs/data/figs2_llm_signature.csv holds them)."""
    table = summary_table(rows)
    apply_style()
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 1.4 + 0.55 * len(list(paired(rows)))), sharey=True,
                             layout="constrained")
    plot_gaps(axes, rows)
    fig.suptitle("What staleness changes in the small LLM: the gradient cosine or the accuracy?", fontsize=8)
    gap_rows = gaps(rows)
    paths = [write_records(rows, out_dir / f"{NAME}.csv"), write_records(table, out_dir / f"{NAME}_table.csv"),
             write_records(gap_rows, out_dir / f"{NAME}_gaps.csv"), *save_figure(fig, out_dir, NAME)]
    for g in gap_rows:
        print(f"  gap {g['config']:<16} s={g['staleness']:>2} − sync: " + "  ".join(
            f"{key} {g[f'gap_{key}']:+.3f} [{g[f'gap_{key}_low']:+.3f}, {g[f'gap_{key}_high']:+.3f}]"
            for key in GAP_KEYS) + f"  SNR_h sync {g['sync_snr_halves']:.3f}")
    for r in table:
        print(f"  {r['config']:<16} s={r['staleness']:>2}  cos_prev {r['cos_prev']:+.3f}  cos_prev_step "
              f"{r['cos_prev_step']:+.3f}  cos_update {r['cos_update']:+.3f}  SNR_h {r['snr_halves']:.3f}  "
              f"final acc {r['final_accuracy']:.3f}  KL {r['kl_behaviour_mean']:.3f}  ({r['seeds']} seeds)")
    return paths
