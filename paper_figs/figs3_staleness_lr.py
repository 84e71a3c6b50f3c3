"""figs3_staleness_lr: the staleness × step-size law at the toy scales and the LLM testbed — the largest stable step
size against s, naive async and async + GAC, and the fitted exponent p of max_stable_lr ∝ s^(−p) beside theory's.

(a, b) max_stable_lr (stable on ≥ half of the seeds; bars: smallest to largest seed) against s under the
``progress`` criterion, one line per scale, with theory's largest stable step where a closed form applies
(delayed GD a*(s)/λ_max; GAC: the mean-field limit, a lower bound). (c) the fitted p with its 90 % seed-bootstrap
interval for every scale × criterion × method, beside the same fit of theory's exact curve over s ∈ {1, …, 16}
(a*(s): 0.853, asymptotically 1; mean-field GAC: 0.073, asymptotically 0). The runs and the definition of "stable"
are in ``experiments.staleness_lr``; this module plots them and writes NAME.csv (the table) and NAME_fit.csv.
(d) the LLM testbed (0.6M Qwen3, GRPO; "stable": finite and the final held-out accuracy ≥ half the run's best): its
search is hours of CPU, so no profile of this figure runs it; the panel and the LLM rows of (c) and of the CSVs are
read from the committed ``docs/data/staleness_lr_scaling.csv`` (``python -m experiments.staleness_lr --profile full
--scales quadratic bandit_gaussian bandit_gaussian_mean llm``), and the panel says so where that file has no LLM rows.
(e) the same at the high-SNR configuration (``experiments.llm_highsnr``: uncorrected ratio, "stable": no collapse),
read from the committed ``docs/data/staleness_lr_highsnr.csv`` (its command is in the file), its fits in (c).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from experiments.profiles import lookup
from experiments.staleness_lr import (
    COLUMNS,
    CRITERIA,
    FIT_COLUMNS,
    METHODS,
    SCALES,
    STALENESS,
    fit_exponent,
    fit_path,
    fit_rows,
    search_edges,
    search_scale,
    table_rows,
    theory_step,
)
from paper_figs.common import Results, apply_style, label_words, method_color, save_figure
from runtime.cache import Unit, unit
from runtime.files import read_records, write_records

NAME = "figs3_staleness_lr"
SCALE_STYLE = {"quadratic": ("o", "-"), "bandit_gaussian": ("s", "--"), "bandit_gaussian_mean": ("^", ":"),
               "llm": ("D", "-"), "llm_highsnr": ("D", "-")}
SCALE_LABEL = {"quadratic": "noisy quadratic", "bandit_gaussian": "Gaussian bandit (GRPO)",
               "bandit_gaussian_mean": "Gaussian bandit (r − mean)", "llm": "LLM testbed (committed)",
               "llm_highsnr": "LLM, batch SNR ≥ 1 (committed)"}
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "staleness_lr_scaling.csv"
"""The committed full-profile table whose ``llm`` rows (d) draws (its fits beside it, ``fit_path``)."""
COMMITTED_HIGHSNR = COMMITTED.with_name("staleness_lr_highsnr.csv")
"""The committed high-SNR table (e) draws (its fits beside it)."""
METHOD_LABEL = {"naive": "naive async", "gac": "async + GAC (default)"}


def unit_name(scale: str, criterion: str) -> str:
    return f"{NAME}_{scale}_{criterion}"


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """One cached unit per scale × criterion (on the CPU whatever ``device``: the toys are small)."""
    return [unit(unit_name(scale, criterion), search_scale, scale, profile, criterion, cost=5.0)
            for scale in SCALES for criterion in CRITERIA]


def committed_rows(path: Path, scale: str | None = None) -> tuple[list[dict], list[dict]]:
    """The rows of a committed table and of its fits (those of ``scale``; None: all), less the provenance columns."""
    def mine(rows):
        return [r for r in rows if scale is None or r["scale"] == scale]

    return ([{k: v for k, v in r.items() if k in COLUMNS} for r in mine(read_records(path))],
            [{k: v for k, v in r.items() if k in FIT_COLUMNS} for r in mine(read_records(fit_path(path)))])


def committed_llm(path: Path = COMMITTED, scale: str = "llm") -> tuple[list[dict], list[dict]]:
    """``committed_rows`` of ``scale``, empty where the file or its fits are missing."""
    if not path.is_file() or not fit_path(path).is_file():
        return [], []
    return committed_rows(path, scale)


def plot(results: Results, out_dir: Path) -> list[Path]:
    found = [value for u, value in results.items if u.kind.startswith(NAME)]
    (llm_table, llm_fits), (high_table, high_fits) = committed_llm(), committed_llm(COMMITTED_HIGHSNR, "llm_highsnr")
    return draw([row for f in found for row in table_rows(f)] + llm_table + high_table,
                [row for f in found for row in fit_rows(f)] + llm_fits + high_fits, out_dir)


def committed_tables(path: Path = COMMITTED) -> tuple[list[dict], list[dict]]:
    """Every row of the committed full-profile table and of its fits (the provenance columns set aside): what the
    full profile draws, without its hours of search."""
    (table, fits), (high_table, high_fits) = committed_rows(path), committed_llm(COMMITTED_HIGHSNR, "llm_highsnr")
    return table + high_table, fits + high_fits


def draw(table: list[dict], fits: list[dict], out_dir: Path) -> list[Path]:
    """The figure and its two CSVs from the boundary ``table`` (``COLUMNS``) and its ``fits`` (``FIT_COLUMNS``)."""
    paths = [write_records(table, out_dir / f"{NAME}.csv", COLUMNS),
             write_records(fits, out_dir / f"{NAME}_fit.csv", FIT_COLUMNS)]
    apply_style()
    fig, axes = plt.subplots(1, 5, figsize=(16.5, 3.4), layout="constrained")
    for ax, method in zip(axes[:2], METHODS, strict=True):
        for scale in SCALES:
            rows = [r for r in table if r["scale"] == scale and r["method"] == method and r["criterion"] == "progress"]
            if not rows:
                continue
            marker, line = SCALE_STYLE[scale]
            s, _ = _boundary_line(ax, rows, method, marker=marker, ls=line, label=SCALE_LABEL[scale])
            if all(math.isfinite(r["theory_lr"]) for r in rows) and scale != "bandit_gaussian_mean":
                ax.plot(s, [r["theory_lr"] for r in rows], color="black", lw=1.0, ls="-.",
                        label=r"theory $a^*(s)/\lambda_{\max}$ (quadratic)" if method == "naive"
                        else "mean-field GAC limit (a lower bound)")
        ax.set(xscale="log", yscale="log", title=f"({'ab'[METHODS.index(method)]}) {METHOD_LABEL[method]}",
               xlabel="staleness $s$", ylabel=r"largest stable step size $\eta$")
        ax.set_xticks(list(STALENESS), [str(s) for s in STALENESS])
        ax.minorticks_off()
        low, high = ax.get_ylim()
        ticks = [t for t in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0) if low <= t <= high]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=6)  # below the panel, not on a line
    _plot_exponents(axes[2], fits)
    _plot_llm(axes[3], [r for r in table if r["scale"] == "llm"])
    _plot_llm(axes[4], [r for r in table if r["scale"] == "llm_highsnr"], "llm_highsnr")
    paths += save_figure(fig, out_dir, NAME)
    for r in fits:
        print(f"  {r['scale']:<21} {r['criterion']:<8} {r['method']:<5} p = {r['exponent']:.3f} "
              f"[{r['exponent_low']:.3f}, {r['exponent_high']:.3f}]  theory {r['theory_exponent']:.3f}")
    return paths


def _boundary_line(ax, rows: list[dict], method: str, **style) -> tuple[list, list]:
    """max_stable_lr against s for ``rows`` (one method, one scale), bars from the smallest to the largest seed's
    boundary; returns (s, max_stable_lr)."""
    s = [r["staleness"] for r in rows]
    y = [r["max_stable_lr"] for r in rows]
    spread = [[v - r["lr_all_seeds"] for v, r in zip(y, rows, strict=True)],
              [r["lr_any_seed"] - v for v, r in zip(y, rows, strict=True)]]
    ax.errorbar(s, y, yerr=spread, color=method_color(method), capsize=2, **style)
    return s, y


def _plot_llm(ax, rows: list[dict], scale: str = "llm") -> None:
    """(d) the LLM testbed's, or (e) the high-SNR configuration's, max_stable_lr against s (progress criterion), both
    methods, with a 1/s line through naive's s = 1 point (the S·η law)."""
    rows = [r for r in rows if r["criterion"] == "progress"]
    name = "(d) LLM testbed" if scale == "llm" else "(e) LLM, batch SNR ≥ 1"
    if not rows:
        ax.text(0.5, 0.5, "no committed LLM data", ha="center", va="center", transform=ax.transAxes)
        ax.set(title=name, xticks=[], yticks=[])
        return
    for method in METHODS:
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["staleness"])
        s, y = _boundary_line(ax, mine, method, marker="D", label=METHOD_LABEL[method])
        if method == "naive" and mine:
            ax.plot(s, [y[0] * s[0] / k for k in s], color="grey", lw=0.8, label="1/s through s = 1 (S·η law)")
    for edge in search_edges(scale, lookup("law", "full")):  # a walked scale's top: where its walks may climb
        ax.axhline(edge, color="black", lw=0.6, ls=":")
    seeds, steps = rows[0]["seeds"], rows[0]["steps"]
    failure = "" if scale == "llm" else "uncorrected ratio; stable: not collapsed\n"
    ax.set(xscale="log", yscale="log", xlabel="staleness $s$", ylabel="largest stable AdamW step size",
           title=f"{name}: {seeds} warm starts, {steps} steps\n{failure}(committed; dotted: the search range)")
    ax.set_xticks(list(STALENESS), [str(k) for k in STALENESS])
    ax.minorticks_off()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=6)


def _plot_exponents(ax, fits: list[dict]) -> None:
    """(c): one row per scale × criterion, the two methods' p with their intervals; theory's as vertical lines."""
    labels = []
    rows_present = [(sc, c) for sc in (*SCALES, "llm", "llm_highsnr") for c in CRITERIA
                    if any((r["scale"], r["criterion"]) == (sc, c) for r in fits)]
    for i, (scale, criterion) in enumerate(rows_present):
        labels.append(f"{SCALE_LABEL[scale]}\n{criterion}")
        censored = []
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
                censored.append(METHOD_LABEL[method])
        if censored:  # one line per row, so two censored methods do not print over each other
            ax.text(0.5, i, f"{' and '.join(censored)}: censored", fontsize=6, va="center", ha="center",
                    color="#555555")
    s = list(STALENESS)
    for method, style in zip(METHODS, ("--", ":"), strict=True):
        ax.axvline(fit_exponent(s, theory_step(method, s)), color=method_color(method), ls=style, lw=1.0,
                   label=f"theory fit, {label_words(method)}")
    ax.axvline(1.0, color="grey", lw=0.8, ls="-", label="1/s (S·η law)")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # top to bottom, the last row clear of the x axis' labels
    ax.set(xlabel=r"fitted exponent $p$ ($\eta_{\max} \propto s^{-p}$)", xlim=(-0.2, 1.2),
           title="(c) exponent, 90 % seed bootstrap\n(censored: boundary outside the search range)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=6)
