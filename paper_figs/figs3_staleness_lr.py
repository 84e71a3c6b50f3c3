"""figs3_staleness_lr: the staleness × step-size law at the toy scales — the largest stable step size against s,
naive async and async + GAC, and the fitted exponent p of max_stable_lr ∝ s^(−p) beside theory's.

(a, b) max_stable_lr (stable on ≥ half of the seeds; bars: smallest to largest seed) against s under the
``progress`` criterion, one line per scale, with theory's largest stable step where a closed form applies
(delayed GD a*(s)/λ_max; GAC: the mean-field limit, a lower bound). (c) the fitted p with its 90 % seed-bootstrap
interval for every scale × criterion × method, beside the same fit of theory's exact curve over s ∈ {1, …, 16}
(a*(s): 0.853, asymptotically 1; mean-field GAC: 0.073, asymptotically 0). The runs and the definition of "stable"
are in ``experiments.staleness_lr``; this module plots them and writes NAME.csv (the table) and NAME_fit.csv.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from experiments.cache import Unit, unit
from experiments.staleness_lr import (
    COLUMNS,
    CRITERIA,
    FIT_COLUMNS,
    METHODS,
    SCALES,
    STALENESS,
    fit_exponent,
    fit_rows,
    search_scale,
    table_rows,
    theory_step,
)
from paper_figs.common import Results, apply_style, method_color, save_figure
from sim.record import write_records

NAME = "figs3_staleness_lr"
SCALE_STYLE = {"quadratic": ("o", "-"), "bandit_gaussian": ("s", "--"), "bandit_gaussian_mean": ("^", ":")}
SCALE_LABEL = {"quadratic": "noisy quadratic", "bandit_gaussian": "Gaussian bandit (GRPO)",
               "bandit_gaussian_mean": "Gaussian bandit (r − mean)"}
METHOD_LABEL = {"naive": "naive async", "gac": "async + GAC (default)"}


def unit_name(scale: str, criterion: str) -> str:
    return f"{NAME}_{scale}_{criterion}"


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """One cached unit per scale × criterion (on the CPU whatever ``device``: the toys are small)."""
    return [unit(unit_name(scale, criterion), search_scale, scale, profile, criterion, cost=20.0)
            for scale in SCALES for criterion in CRITERIA]


def plot(results: Results, out_dir: Path) -> list[Path]:
    found = [value for u, value in results.items if u.kind.startswith(NAME)]
    table = [row for f in found for row in table_rows(f)]
    fits = [row for f in found for row in fit_rows(f)]
    paths = [write_records(table, out_dir / f"{NAME}.csv", COLUMNS),
             write_records(fits, out_dir / f"{NAME}_fit.csv", FIT_COLUMNS)]
    apply_style()
    fig, axes = plt.subplots(1, 3, figsize=(9.9, 3.2), layout="constrained")
    for ax, method in zip(axes[:2], METHODS, strict=True):
        for scale in SCALES:
            rows = [r for r in table if r["scale"] == scale and r["method"] == method and r["criterion"] == "progress"]
            if not rows:
                continue
            marker, line = SCALE_STYLE[scale]
            s = [r["staleness"] for r in rows]
            y = [r["max_stable_lr"] for r in rows]
            spread = [[v - r["lr_all_seeds"] for v, r in zip(y, rows, strict=True)],
                      [r["lr_any_seed"] - v for v, r in zip(y, rows, strict=True)]]
            ax.errorbar(s, y, yerr=spread, marker=marker, ls=line, color=method_color(method), capsize=2,
                        label=SCALE_LABEL[scale])
            if all(math.isfinite(r["theory_lr"]) for r in rows) and scale != "bandit_gaussian_mean":
                ax.plot(s, [r["theory_lr"] for r in rows], color="black", lw=1.0, ls="-.",
                        label="theory a*(s)/λ_max (quadratic)" if method == "naive"
                        else "mean-field GAC limit (a lower bound)")
        ax.set(xscale="log", yscale="log", title=METHOD_LABEL[method], xlabel="staleness s",
               ylabel="largest stable step size η")
        ax.set_xticks(list(STALENESS), [str(s) for s in STALENESS])
        ax.minorticks_off()
        low, high = ax.get_ylim()
        ticks = [t for t in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0) if low <= t <= high]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.legend(loc="lower left", fontsize=6)
    _plot_exponents(axes[2], fits)
    paths += save_figure(fig, out_dir, NAME)
    for r in fits:
        print(f"  {r['scale']:<21} {r['criterion']:<8} {r['method']:<5} p = {r['exponent']:.3f} "
              f"[{r['exponent_low']:.3f}, {r['exponent_high']:.3f}]  theory {r['theory_exponent']:.3f}")
    return paths


def _plot_exponents(ax, fits: list[dict]) -> None:
    """(c): one row per scale × criterion, the two methods' p with their intervals; theory's as vertical lines."""
    labels = []
    for i, (scale, criterion) in enumerate((sc, c) for sc in SCALES for c in CRITERIA):
        labels.append(f"{SCALE_LABEL[scale]}\n{criterion}")
        for offset, method in zip((-0.15, 0.15), METHODS, strict=True):
            row = next((r for r in fits if (r["scale"], r["criterion"], r["method"]) == (scale, criterion, method)),
                       None)
            if row is None:
                continue
            y = i + offset
            if math.isfinite(row["exponent"]):
                ax.errorbar(row["exponent"], y, xerr=[[row["exponent"] - row["exponent_low"]],
                                                      [row["exponent_high"] - row["exponent"]]],
                            marker="o", color=method_color(method), capsize=2, ls="none",
                            label=METHOD_LABEL[method] if i == 0 else None)
            else:
                ax.text(0.5, y, "censored (never diverged)", fontsize=6, va="center", ha="center",
                        color=method_color(method))
    s = list(STALENESS)
    for method, style in zip(METHODS, ("--", ":"), strict=True):
        ax.axvline(fit_exponent(s, theory_step(method, s)), color=method_color(method), ls=style, lw=1.0,
                   label=f"theory fit, {method}")
    ax.axvline(1.0, color="grey", lw=0.8, ls="-", label="1/s (S·η law)")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set(xlabel=r"fitted exponent $p$ ($\eta_{\max} \propto s^{-p}$)", title="exponent, 90 % seed bootstrap",
           xlim=(-0.2, 1.2))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=6)
