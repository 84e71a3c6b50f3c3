"""fig6_ablation: GAC variants and the peer stabilizers at s = 4, 8, 16, on the toy simulators.

Variants: threshold τ (project), project vs cap, skip, prev vs EMA reference, a fixed vs an adaptive
threshold (``gac.EMAThreshold``), and — with Adam on the quadratic — GAC on the raw gradient vs on the
Adam update. Scored by the final objective relative to sync (quadratic: loss ratio, lower is better;
bandit: reward gap ratio (J* − J)/(J* − J_sync), lower is better). The default GAC configuration is
picked from this table by the rule ``experiments.ablation.pick_default`` and reported in ``fig6_ablation.md``.
The runs and scores are computed in ``experiments.ablation``; this module writes and plots them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from experiments.ablation import ADAM_LR, GAC_VARIANTS, SIMS, STALENESS, pick_default, run_tables
from paper_figs.common import SIM_TITLES, Results, apply_style, label_words, method_color, panel_letters, save_figure
from runtime.cache import Unit, unit
from runtime.files import atomic_write_bytes, write_records

NAME = "fig6_ablation"


def write_readme(table: list[dict], best: str, scores: dict, out_dir: Path) -> Path:
    lines = [f"# {NAME}: GAC ablation and peers (ratio of the final objective to sync; 1 = as good as sync)", "",
             "quadratic: final loss / sync's; bandit_gaussian: reward gap (J*−J) / sync's gap; quadratic_adam: "
             f"Adam (lr {ADAM_LR}) loss / sync Adam's. Median over seeds; 'div' = diverged seeds.", ""]
    for sim in SIMS:
        labels = list(dict.fromkeys(r["label"] for r in table if r["sim"] == sim and r["staleness"] > 0))
        lines += [f"## {sim}", "", "| method | " + " | ".join(f"s={s}" for s in STALENESS) + " |",
                  "|---|" + "---|" * len(STALENESS)]
        for label in labels:
            cells = []
            for s in STALENESS:
                row = next((r for r in table if r["sim"] == sim and r["label"] == label and r["staleness"] == s), None)
                cells.append("" if row is None else f"{row['ratio_to_sync']:.3g}"
                             + (f" (div {row['diverged']}/{row['seeds']})" if row["diverged"] else ""))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Default GAC configuration", "",
              f"Picked by the rule in `pick_default` (smallest worst-case ratio to sync over s = 4, 8, 16 on the "
              f"quadratic and the Gaussian bandit, no diverged seed; within 5 % ties broken by the geometric-mean "
              f"ratio): **{best}** "
              f"({GAC_VARIANTS[best]}), worst-case ratio {scores[best]:.3g}.", "",
              "Worst-case ratio of every non-diverging variant: "
              + ", ".join(f"{k} {v:.3g}" for k, v in sorted(scores.items(), key=lambda kv: kv[1])) + ".", ""]
    return atomic_write_bytes(out_dir / f"{NAME}.md", "\n".join(lines).encode())


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The ablation's simulations and scores, one cached unit."""
    return [unit(NAME, run_tables, profile, device, cost=15.0)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    table = results.value(NAME)
    best, scores = pick_default(table)
    paths = [write_records(table, out_dir / f"{NAME}.csv"), write_readme(table, best, scores, out_dir)]
    apply_style()
    fig, axes = plt.subplots(1, len(SIMS), figsize=(3.3 * len(SIMS), 4.4), layout="constrained")
    for ax, sim in zip(axes, SIMS, strict=True):
        labels = list(dict.fromkeys(r["label"] for r in table if r["sim"] == sim and r["staleness"] > 0))
        width = 0.8 / len(STALENESS)
        for k, s in enumerate(STALENESS):
            ratios = []
            for label in labels:
                row = next(r for r in table if r["sim"] == sim and r["label"] == label and r["staleness"] == s)
                ratios.append(min(row["ratio_to_sync"], 1e4))
            ax.barh([i + k * width for i in range(len(labels))], ratios, height=width, label=f"s = {s}",
                    color=["#fdbb84", "#e34a33", "#7f0000"][k])
        ax.set_yticks([i + width for i in range(len(labels))], [label_words(label) for label in labels])
        for tick, label in zip(ax.get_yticklabels(), labels, strict=True):
            tick.set_color(method_color(label.split("_")[0]))
        ax.axvline(1.0, color="#000000", lw=0.8)
        ax.set(xscale="log", title=SIM_TITLES.get(sim, sim), xlabel="final objective ÷ sync's (10⁴: diverged)")
    panel_letters(axes)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(STALENESS))  # below the panels, not on a bar
    fig.suptitle(f"default GAC: {label_words(best)} (smallest worst-case ratio to sync over s = 4, 8, 16)",
                 fontsize=7)
    paths += save_figure(fig, out_dir, NAME)
    print(f"  default GAC: {best} {GAC_VARIANTS[best]} (worst-case ratio {scores[best]:.3g})")
    return paths
