"""figs1_bandit_snr: how staleness hurts the bandits as a function of signal-to-noise (groups B × group size G).

For each bandit (Gaussian policy, 10-armed softmax, linear contextual softmax) and each (B, G): the mean
consecutive cosine after warm-up and the final reward gap J* − J versus staleness for naive async, and
at s ∈ {8, 16} the stabilizers (gac default, lr_scale, tis, m2po). Writes the summary table it plots.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from experiments import toy
from experiments.cache import cached_runs
from paper_figs.common import apply_style, method_color, save_figure
from sim.bandit import run_bandit
from sim.grid import setting
from sim.record import write_records

NAME = "figs1_bandit_snr"
STALENESS = (0, 2, 4, 8, 16)
FIXES = ("gac", "lr_scale", "tis", "m2po")
SNR = {"smoke": ((1, 4), (4, 8)), "quick": ((1, 4), (4, 16), (8, 32)),
       "full": ((1, 4), (2, 8), (4, 16), (8, 32), (16, 64))}
PROBLEMS = (("bandit_gaussian", toy.GAUSSIAN, toy.GAUSSIAN_LR), ("bandit_karmed", toy.KARMED, toy.SOFTMAX_LR),
            ("bandit_contextual", toy.CONTEXTUAL, toy.SOFTMAX_LR))


def run_table(profile: str) -> list[dict]:
    p = toy.profile_of(profile)
    steps = min(300, p.bandit_steps)
    seeds = min(3, p.seeds)
    table = []
    for sim, problem, lr in PROBLEMS:
        settings = [setting("none", s, lr) for s in STALENESS]
        settings += [setting(m, s, lr) for s in (8, 16) for m in FIXES]
        for groups, group_size in SNR[profile]:
            result = run_bandit(problem, settings, steps, seeds, groups=groups, group_size=group_size,
                                record_every=steps, progress=True)
            optimum = result.meta["optimal_reward"]
            for i, s in enumerate(settings):
                rows = result.rows_of(i)
                gaps = (optimum - result.summary["final_objective"][rows]).sort().values
                table.append({"sim": sim, "groups": groups, "group_size": group_size, "label": s.name,
                              "staleness": s.staleness, "median_gap": float(gaps[len(gaps) // 2]),
                              "initial_gap": optimum - result.meta["initial_reward"],
                              "mean_cos_prev": float(result.summary["mean_cos_prev"][rows].mean()),
                              "diverged": int(result.summary["diverged"][rows].sum()), "seeds": seeds})
    return table


def main(profile: str, out_dir: Path, device: str = "cpu") -> list[dict]:
    table = cached_runs(NAME, profile, device, lambda: run_table(profile))
    write_records(table, out_dir / f"{NAME}.csv")
    apply_style()
    fig, axes = plt.subplots(2, len(PROBLEMS), figsize=(3.3 * len(PROBLEMS), 4.8), squeeze=False)
    shades = ["#c6dbef", "#6baed6", "#2171b5", "#08306b", "#000000"]
    for k, (sim, _, _) in enumerate(PROBLEMS):
        for j, (groups, size) in enumerate(SNR[profile]):
            naive = [r for r in table if r["sim"] == sim and r["groups"] == groups and r["group_size"] == size
                     and r["label"] in ("sync", "none")]
            xs = [r["staleness"] for r in naive]
            axes[0][k].plot(xs, [r["mean_cos_prev"] for r in naive], "o-", color=shades[j],
                            label=f"B={groups}, G={size}")
            axes[1][k].plot(xs, [r["median_gap"] for r in naive], "o-", color=shades[j])
            if j == len(SNR[profile]) - 1:
                for m in FIXES:
                    fixed = [r for r in table if r["sim"] == sim and r["groups"] == groups and r["group_size"] == size
                             and r["label"] == m]
                    axes[1][k].plot([r["staleness"] for r in fixed], [r["median_gap"] for r in fixed], "x",
                                    color=method_color(m), label=f"{m} (B={groups}, G={size})")
        axes[0][k].set(title=sim, xlabel="staleness s", ylabel="mean cos(g_t, g_{t-1})", ylim=(-0.5, 1.0))
        axes[1][k].set(xlabel="staleness s", ylabel="final reward gap J* − J (median)", yscale="log")
    axes[0][0].legend()
    axes[1][0].legend(fontsize=6)
    save_figure(fig, out_dir, NAME)
    for r in table:
        if r["label"] in ("sync", "none") or r["staleness"] == 8:
            print(f"  {r['sim']:<18} B={r['groups']:>2} G={r['group_size']:>2} {r['label']:<8} s={r['staleness']:>2} "
                  f"cos {r['mean_cos_prev']:+.2f} gap {r['median_gap']:.3g}")
    return table
