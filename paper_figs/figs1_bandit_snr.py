"""figs1_bandit_snr: how staleness hurts the bandits as a function of signal-to-noise (groups B × group size G).

For each bandit (Gaussian policy, 10-armed softmax, linear contextual softmax) and each (B, G): the mean
consecutive cosine after warm-up and the final reward gap J* − J versus staleness for naive async, and
at s ∈ {8, 16} the stabilizers (gac default, lr_scale, tis, m2po). Writes the summary table it plots; the runs
are defined in ``experiments.bandit_snr``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from experiments.bandit_snr import FIXES, PROBLEMS, run_table
from experiments.profiles import lookup
from paper_figs.common import SIM_TITLES, Results, apply_style, label_words, method_color, panel_letters, save_figure
from runtime.cache import Unit, unit
from runtime.files import write_records

NAME = "figs1_bandit_snr"


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The bandit simulations at every SNR, one cached unit (on the CPU whatever ``device``)."""
    return [unit(NAME, run_table, profile, cost=14.0)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    profile, table = results.profile, results.value(NAME)
    paths = [write_records(table, out_dir / f"{NAME}.csv")]
    apply_style()
    fig, axes = plt.subplots(2, len(PROBLEMS), figsize=(3.3 * len(PROBLEMS), 4.8), squeeze=False)
    shades = ["#c6dbef", "#6baed6", "#2171b5", "#08306b", "#000000"]
    for k, (sim, _, _) in enumerate(PROBLEMS):
        for j, (groups, size) in enumerate(lookup("bandit_snr", profile).levels):
            naive = [r for r in table if r["sim"] == sim and r["groups"] == groups and r["group_size"] == size
                     and r["label"] in ("sync", "naive")]
            xs = [r["staleness"] for r in naive]
            axes[0][k].plot(xs, [r["mean_cos_prev"] for r in naive], "o-", color=shades[j],
                            label=f"B = {groups}, G = {size}")
            axes[1][k].plot(xs, [r["median_gap"] for r in naive], "o-", color=shades[j])
            if j == len(lookup("bandit_snr", profile).levels) - 1:
                for m in FIXES:
                    fixed = [r for r in table if r["sim"] == sim and r["groups"] == groups and r["group_size"] == size
                             and r["label"] == m]
                    axes[1][k].plot([r["staleness"] for r in fixed], [r["median_gap"] for r in fixed], "x",
                                    color=method_color(m), label=f"{label_words(m)} (B = {groups}, G = {size})")
        axes[0][k].set(title=SIM_TITLES.get(sim, sim), xlabel="staleness $s$", ylabel=r"mean $\cos(g_t, g_{t-1})$",
                       ylim=(-0.5, 1.0))
        axes[1][k].set(xlabel="staleness $s$", ylabel="final reward gap $J^* - J$ (median)", yscale="log")
    panel_letters([ax for row in axes for ax in row])
    for row in axes:  # each row's key below the figure's panels, never over a curve
        handles, names = row[0].get_legend_handles_labels()
        row[-1].legend(handles, names, fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    paths += save_figure(fig, out_dir, NAME)
    for r in table:
        if r["label"] in ("sync", "naive") or r["staleness"] == 8:
            print(f"  {r['sim']:<18} B={r['groups']:>2} G={r['group_size']:>2} {r['label']:<8} s={r['staleness']:>2} "
                  f"cos {r['mean_cos_prev']:+.2f} gap {r['median_gap']:.3g}")
    return paths
