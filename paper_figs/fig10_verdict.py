"""fig10_verdict: what closes the async − sync gap at LLM scale — every arm at its own step size over reporting warm
starts × seeds (quick and full profiles: the committed verdict v2; v1's step-norm and sync + arm controls are drawn
hatched where a table has them).

Panels: (a) each arm minus naive async (paired, hierarchical interval: warm starts, then seeds; sync's bar is
the async gap), controls hatched;
(b) final accuracy against the mean KL to the behaviour policy, one dot per run (the drift correlation);
(c) the applied update's alignment cos(Δθ_t, Δθ_{t−1}) per arm (where the aligned progress is);
(d) the tuning curves (committed verdict) or, in the gpu profile (fixed step size, no tuning), the accuracy per run;
(e, f) the same arms in the toys at s = 16, each at its own step size (experiments/verdict_toys.py): final objective
relative to sync, and the applied update's alignment, per simulator × structure × optimizer.
Runs: experiments/verdict.py and experiments/verdict_toys.py (cached).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments import verdict as verdict_mod
from experiments import verdict_toys
from experiments.llm import Run, dry_run_args, run_unit
from experiments.profiles import lookup
from paper_figs.common import Results, apply_style, label_words, method_color, save_figure
from runtime.cache import Unit, unit
from runtime.files import write_records
from sim.stabilizers import NO_CONTROL

NAME = "fig10_verdict"
COMMITTED = "v2"
"""The committed verdict the full profile draws (``experiments.verdict.COMMITTED_PROFILES``)."""


def arm_color(row: dict) -> str:
    """Color by direction control, else objective, else step control (one family color each)."""
    for axis in ("direction_control", "objective_fn", "step_control"):
        if row[axis] != NO_CONTROL:
            return {"kl_target": "#17becf", "braking": "#bcbd22"}.get(row[axis], method_color(row[axis]))
    return method_color("sync" if row["staleness"] == 0 else "naive")


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The toys' verdict (one cached unit) and the LLM verdict: the gpu profile's fixed-step GRPO runs, one unit
    each; the quick and full profiles draw the committed v2 verdict (``experiments.verdict.committed_verdict``: 8 warm
    starts × 2 seeds, every arm tuned) and run no LLM unit. Its runs depend on its tuning rounds, so they cannot be
    units of a graph fixed in advance; ``python -m experiments.verdict --profile v2 [--executor ray]`` remakes them
    (each run a task of its own, no pool inside a worker)."""
    toys = unit(f"{NAME}/toys", verdict_toys.toy_verdict_rows, toy_profile(profile, dry_run), spec=f"{NAME}/toys",
                cost=30.0)
    if profile == "quick":
        return [toys]
    p = lookup("verdict", profile)
    if dry_run:
        p = verdict_mod.dry_run_profile(p)
    if p.tune:
        return [toys]
    arms = {name: verdict_mod.ARMS[name] for name in p.arms}
    reporting = verdict_mod.reporting_runs(p, arms, {name: p.fixed_lr for name in arms}, device=device)
    if dry_run:
        reporting = [Run(dry_run_args(r.args), r.roles) for r in reporting]
    return [toys, *[run_unit(r) for r in reporting]]


COMMITTED_TOYS = Path(__file__).resolve().parents[1] / "docs" / "data" / "verdict_toys.csv"
"""The toys' verdict of the full profile (``python -m experiments.verdict_toys --profile full``)."""


def committed_results() -> Results:
    """The full profile's results without a run: its toy unit's value read from ``COMMITTED_TOYS`` (the provenance
    columns set aside); ``plot`` reads the committed LLM verdict itself (``llm_verdict``)."""
    from runtime.files import read_records

    toys = [{c: r[c] for c in verdict_toys.COLUMNS} for r in read_records(COMMITTED_TOYS)]
    (toy_unit,) = runs("full")
    return Results("full", items=((toy_unit, toys),))


def draws_committed(results: Results) -> bool:
    """Whether the LLM panels draw the committed verdict: the profile declared no GRPO run (full, see ``runs``)."""
    return not results.runs()


def llm_verdict(results: Results) -> dict[str, list[dict]]:
    """{"tuning", "runs", "table"}: the committed v2 verdict (full profile), or the fixed-step runs tabulated as
    ``experiments.verdict.verdict`` does."""
    if draws_committed(results):
        return verdict_mod.committed_verdict(COMMITTED)
    commit = verdict_mod.code_commit()
    rows = [{**verdict_mod.run_row(item.roles[0], item.roles[1], item, res), "code": commit}
            for item, res in results.runs()]
    return {"tuning": [], "runs": rows, "table": verdict_mod.verdict_table(rows, [])}


def plot_gap(ax, table: list[dict]) -> None:
    """(a) each arm minus naive async in final accuracy, paired on warm start and seed (sync's bar is the async gap).
    The difference, not the share of the gap recovered: the share's denominator (sync − naive) can be ≈ 0, as in the
    quick profile's 40 steps, and then the ratio says nothing (it stays in the table CSV)."""
    rows = [r for r in table if r["arm"] != "naive" and r["role"] != "mild"]
    rows = sorted(rows, key=lambda r: (r["role"] != "report", -np.nan_to_num(r["minus_naive"], nan=-9)))
    for i, r in enumerate(rows):
        diff = r["minus_naive"]
        ax.barh(i, np.nan_to_num(diff), color=arm_color(r), alpha=0.85, hatch=None if r["role"] == "report" else "//")
        if np.isfinite(r["minus_naive_low"]):
            ax.errorbar(diff, i, xerr=[[diff - r["minus_naive_low"]], [r["minus_naive_high"] - diff]], color="black",
                        capsize=2, lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{label_words(r['arm'])} (step {r['lr']:.2g})" for r in rows], fontsize=6.5)
    ax.invert_yaxis()
    ax.axvline(0, color="#d62728", lw=0.8)
    ax.set(xlabel="final accuracy − naive async's\n(paired; bar: mean, whisker: 90 %\nhierarchical interval)",
           title="(a) arm − naive async (red line)")


def plot_drift(ax, runs: list[dict]) -> None:
    rho, n = verdict_mod.drift_correlation(runs)
    for r in runs:
        if r["role"] == "tuning":
            continue
        ax.scatter(max(r["kl_behaviour_mean"], 1e-6), r["final_accuracy"], color=arm_color(r), s=10,
                   marker="x" if r["diverged"] else "o", alpha=0.7)
    ax.set_xscale("log")
    ax.set(xlabel="mean KL($\\pi_b \\,\\|\\, \\pi_\\theta$) over the run\n(log scale; sync runs drawn at 1e-6)",
           ylabel="final held-out accuracy",
           title=f"(b) drift: Spearman ρ = {rho:+.2f}\n({n} stale runs, TIS left out)")


def plot_alignment(ax, table: list[dict]) -> None:
    rows = [r for r in table if r["role"] == "report"]
    ax.barh(range(len(rows)), [r["cos_update"] for r in rows], color=[arm_color(r) for r in rows])
    ax.set_yticks(range(len(rows)), [label_words(r["arm"]) for r in rows], fontsize=6.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set(xlabel=r"mean $\cos(\Delta\theta_t, \Delta\theta_{t-1})$", xlim=(-0.1, 1.0),
           title="(c) alignment of the applied update")


def plot_tuning_or_runs(ax, tuning: list[dict], runs: list[dict]) -> None:
    if tuning:
        in_family: dict[str, int] = {}  # arms of one color (the GAC placements) differ by line style and marker
        for arm in dict.fromkeys(r["arm"] for r in tuning):
            mine = sorted((r for r in tuning if r["arm"] == arm), key=lambda r: r["lr"])
            color = arm_color(mine[0])
            k = in_family[color] = in_family.get(color, -1) + 1
            ax.plot([r["lr"] for r in mine], [r["score"] for r in mine], color=color, label=label_words(arm),
                    linestyle=LINESTYLES[k % len(LINESTYLES)], marker=MARKERS[k % len(MARKERS)], ms=3)
        ax.set_xscale("log")
        ax.set(xlabel="AdamW step size", ylabel="late held-out accuracy\n(tuning warm start)",
               title="(d) tuning: each arm's own step size")
        ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))  # below, not on a curve
        return
    report = [r for r in runs if r["role"] == "report"]
    arms = list(dict.fromkeys(r["arm"] for r in report))
    for i, arm in enumerate(arms):
        mine = [r for r in report if r["arm"] == arm]
        ax.scatter([r["final_accuracy"] for r in mine], [i] * len(mine), color=arm_color(mine[0]), s=12)
    ax.set_yticks(range(len(arms)), [label_words(a) for a in arms], fontsize=6.5)
    ax.set_ylim(len(arms) - 0.5, -0.5)
    ax.set(xlabel="final held-out accuracy\n(one dot per warm start × seed)",
           title="(d) per run (one fixed step size, no tuning)")


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v")
TOY_ARMS = ("naive", "gac_gradient", "gac_update", "gac_momentum", "braking", "tis", "gac+tis", "kl_target",
            "kl_target+gac", "vcpo")


def plot_toys(ax_final, ax_cos, fig, toys: list[dict], staleness: int = 16) -> None:
    """(e, f) toys at ``staleness``: log10(final / sync's final) and cos(Δθ_t, Δθ_{t−1}) per arm and column."""
    columns = list(dict.fromkeys((r["sim"], r["structure"], r["optimizer"]) for r in toys))
    sync = {(r["sim"], r["structure"], r["optimizer"]): r["final"] for r in toys if r["arm"] == "sync"}
    arms = [a for a in TOY_ARMS if any(r["arm"] == a for r in toys)]
    ratio, cos = (np.full((len(arms), len(columns)), np.nan) for _ in range(2))
    for r in toys:
        key = (r["sim"], r["structure"], r["optimizer"])
        if r["staleness"] == staleness and r["arm"] in arms:
            i, j = arms.index(r["arm"]), columns.index(key)
            ratio[i, j] = np.log10(r["final"] / sync[key]) if r["final"] > 0 and sync.get(key, 0) > 0 else np.nan
            cos[i, j] = r["cos_update"]
    short = {"bandit_gaussian": "bandit", "sgd_momentum": "momentum\nSGD", "one_update": "1 update", "llm": "LLM-like",
             "adam": "Adam"}
    labels = ["\n".join(short.get(part, part) for part in c) for c in columns]
    for ax, values, cmap, vmin, vmax, title, key in (
            (ax_final, ratio, "Reds", 0, 2, f"(e) toys, s = {staleness}: final objective relative to sync, each arm "
             "at its own step size", "$\\log_{10}$(final ÷ sync's final)\n(0: as sync, 1: 10× worse)"),
            (ax_cos, cos, "PuOr_r", -1, 1, f"(f) toys, s = {staleness}: alignment of the applied update",
             r"mean $\cos(\Delta\theta_t, \Delta\theta_{t-1})$")):
        image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        ax.grid(False)  # the style's grid lines would cross the cells
        for i in range(len(arms)):
            for j in range(len(columns)):
                ax.text(j, i, "—" if np.isnan(values[i, j]) else f"{values[i, j]:.2f}", ha="center", va="center",
                        fontsize=6.5, color=text_color(image, values[i, j]))
        ax.set_xticks(range(len(columns)), labels, fontsize=6.5)
        ax.set_yticks(range(len(arms)), [label_words(a) for a in arms], fontsize=6.5)
        ax.set_title(title, fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.04, label=key)


def text_color(image, value: float) -> str:
    """White on a dark cell of ``image``, black on a light one (relative luminance of the cell's color below 0.4)."""
    if np.isnan(value):
        return "black"
    red, green, blue, _ = image.cmap(image.norm(value))
    return "white" if 0.2126 * red + 0.7152 * green + 0.0722 * blue < 0.4 else "black"


def toy_profile(profile: str, dry_run: bool = False) -> str:
    """The toys' profile for a figure profile: smoke under --dry-run, full for full, else quick (CPU toys)."""
    return "smoke" if dry_run else "full" if profile == "full" else "quick"


def plot(results: Results, out_dir: Path) -> list[Path]:
    result = llm_verdict(results)
    runs, table, tuning = result["runs"], result["table"], result["tuning"]
    toys = results.value(f"{NAME}/toys")
    apply_style()
    # at the width of a page: (a-d) two to a row, the toys' two tables (six columns each) one to a row
    fig = plt.figure(figsize=(7.0, 9.0), layout="constrained")
    grid = fig.add_gridspec(4, 2, height_ratios=(1, 1.1, 0.9, 0.9))
    ax_gap, ax_drift, ax_align, ax_runs = (fig.add_subplot(grid[i, j]) for i in (0, 1) for j in (0, 1))
    plot_gap(ax_gap, table)
    plot_drift(ax_drift, runs)
    plot_alignment(ax_align, table)
    plot_tuning_or_runs(ax_runs, tuning, runs)
    plot_toys(fig.add_subplot(grid[2, :]), fig.add_subplot(grid[3, :]), fig, toys)
    paths = [write_records(toys, out_dir / f"{NAME}_toys.csv")]
    committed = draws_committed(results)
    source = "the committed verdict" if committed and runs else f"{results.profile} profile"
    staleness = lookup("verdict", COMMITTED if committed else results.profile).staleness
    fig.suptitle(f"What closes the async gap (LLM, s = {staleness}, {source})")
    paths += [write_records(runs, out_dir / f"{NAME}.csv"), write_records(table, out_dir / f"{NAME}_table.csv")]
    if tuning:
        paths.append(write_records(tuning, out_dir / f"{NAME}_tuning.csv"))
    paths += save_figure(fig, out_dir, NAME)
    for r in table:
        print(f"{r['arm']:>28} {r['role']:>18} s={r['staleness']:<2} acc {r['final_accuracy']:.3f} "
              f"[{r['final_accuracy_low']:.3f}, {r['final_accuracy_high']:.3f}]  gap {r['gap_recovered']:+.2f}  "
              f"KL {r['kl_behaviour_mean']:.3f}  cos_update {r['cos_update']:.2f}")
    return paths
