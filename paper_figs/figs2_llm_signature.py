"""figs2_llm_signature: where the stale-aligned signature appears at LLM scale, one factor at a time.

(a–c) the mean consecutive cosine at each granularity (optimizer updates, RL steps, applied Δθ) against
staleness, one line per configuration (seed mean, bars: seed-bootstrap interval); (d) final held-out accuracy;
(e) the RL-step cosine against the measured per-half SNR (from cos_halves), under the signal-only reference
2·SNR_h/(1 + 2·SNR_h). Runs come from experiments/signature.py (cached with the other LLM figures).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from experiments import signature
from experiments.llm import run_unit
from paper_figs.common import Results, apply_style, save_figure
from runtime.cache import Unit
from runtime.files import write_records

NAME = "figs2_llm_signature"
PANEL_KEYS = (*signature.GRANULARITIES, "final_accuracy")
TITLES = {"cos_prev": "(a) consecutive optimizer updates (raw g)",
          "cos_prev_step": "(b) consecutive RL steps (summed g)", "cos_update": "(c) consecutive applied updates Δθ",
          "final_accuracy": "(d) final held-out accuracy"}
YLABELS = {"cos_prev": "mean cosine of consecutive\nupdates' gradients", "cos_prev_step": "mean cosine of consecutive\n"
           "RL steps' summed gradients", "cos_update": "mean cosine of consecutive\napplied updates Δθ",
           "final_accuracy": "final held-out accuracy"}
"""Each panel's y axis in words (the CSV column is the key)."""
CONFIG_WORDS = {"batch": "{} prompts × {} samples per step", "updates": "{} optimizer updates per RL step",
                "ratio": "{} ratio (stale data used as if fresh)", "clip": "gradient-norm clip at {}",
                "digits": "{}-digit addition", "lr": "AdamW lr {}"}


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


def gaps(rows: list[dict]) -> list[dict]:
    """Per configuration: async at its largest s minus sync, paired by seed, for each of GAP_KEYS (mean over seeds
    and seed-bootstrap interval), with sync's per-half SNR: the numbers behind the hypotheses H1–H4."""
    out = []
    for config in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == config]
        s_max = max(r["staleness"] for r in mine)
        sync = {r["seed"]: r for r in mine if r["staleness"] == 0}
        stale = {r["seed"]: r for r in mine if r["staleness"] == s_max}
        seeds = sorted(set(sync) & set(stale))
        if s_max == 0 or not seeds:
            continue
        row = {"config": config, "staleness": s_max, "seeds": len(seeds),
               "sync_snr_halves": signature.seed_interval([sync[k]["snr_halves"] for k in seeds])[0],
               "async_snr_halves": signature.seed_interval([stale[k]["snr_halves"] for k in seeds])[0]}
        for key in GAP_KEYS:
            diff = [stale[k][key] - sync[k][key] for k in seeds]
            row[f"gap_{key}"], row[f"gap_{key}_low"], row[f"gap_{key}_high"] = signature.seed_interval(diff)
        out.append(row)
    return out


def plot_vs_staleness(ax, table: list[dict], key: str, colors: dict) -> None:
    for config, color in colors.items():
        mine = sorted((r for r in table if r["config"] == config), key=lambda r: r["staleness"])
        s = np.array([r["staleness"] for r in mine])
        mean = np.array([r[key] for r in mine])
        err = np.abs(np.array([[r[f"{key}_low"], r[f"{key}_high"]] for r in mine]).T - mean)
        ax.errorbar(s, mean, yerr=np.nan_to_num(err), color=color, marker="o", ms=3, capsize=2,
                    label=config_label(config))
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(xlabel="staleness $s$", ylabel=YLABELS[key], title=TITLES[key])


def plot_snr(ax, table: list[dict], colors: dict) -> None:
    """RL-step cosine against the measured per-half SNR, with the signal-only reference curve."""
    for r in table:
        ax.scatter(r["snr_halves"], r["cos_prev_step"], color=colors[r["config"]], marker="o" if r["staleness"] == 0
                   else "^", s=10 + 2 * r["staleness"], alpha=0.8)
    snr = np.linspace(0, max([0.5] + [r["snr_halves"] for r in table if r["snr_halves"] == r["snr_halves"]]), 100)
    ax.plot(snr, [signature.snr_reference(x) for x in snr], color="black", ls="--",
            label=r"signal only: $2\,\mathrm{SNR}_h/(1+2\,\mathrm{SNR}_h)$")
    ax.set(xlabel=r"per-half $\mathrm{SNR}_h$, measured from the half-batch cosine",
           ylabel="mean cosine of consecutive\nRL steps' summed gradients",
           title="(e) RL-step cosine vs SNR (○ sync, ▲ async; size: s)")
    ax.legend(loc="upper left")


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The GRPO runs of the signature map (experiments/signature.py)."""
    return [run_unit(r) for r in signature.sweep(profile, device, dry_run)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    rows = [signature.run_row(item, res, device_name(results.device)) for item, res in results.runs()]
    table = summary_table(rows)
    configs = list(dict.fromkeys(r["config"] for r in rows))
    cmap = plt.get_cmap("tab10")
    colors = {c: cmap(i % 10) for i, c in enumerate(configs)}
    apply_style()
    # two to a row at the width of a page, the sixth place for the configurations' legend
    fig, grid = plt.subplots(3, 2, figsize=(7.0, 7.2), layout="constrained")
    axes = grid.ravel()
    for ax, key in zip(axes[:4], PANEL_KEYS, strict=True):
        plot_vs_staleness(ax, table, key, colors)
    plot_snr(axes[4], table, colors)
    axes[5].axis("off")
    axes[5].legend(*axes[0].get_legend_handles_labels(), loc="center", title="configuration (bars: seed interval)")
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
