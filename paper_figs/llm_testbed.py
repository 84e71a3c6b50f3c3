"""The LLM testbed's two figures from its committed per-step data: fig1's cosine panel and fig3's three panels.

``python -m paper_figs.llm_testbed`` draws ``docs/figures/fig1_cosine_llm_testbed.png`` and
``docs/figures/fig3_divergence_llm_testbed.png`` from ``docs/data/llm_figures_steps.csv`` (no run, no cache: the
figures follow the committed data on any machine). ``--compute`` first takes the runs of ``--profile`` from the run
cache (computing the missing ones, as ``python -m experiments.llm_figures`` does) and writes that per-step CSV. The
same drawing code as ``fig1_cosine``'s and ``fig3_divergence``'s LLM panels (``plot_llm`` of each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import tyro

if TYPE_CHECKING:
    import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
STEPS_CSV = ROOT / "docs" / "data" / "llm_figures_steps.csv"
STEP_COLUMNS = ("figure", "arm", "warm_seed", "seed", "method", "gac_space", "staleness", "lr", "step", "accuracy",
                "objective", "grad_norm", "cos_prev", "cos_halves", "cos_update", "kl_behaviour", "nonfinite",
                "final_eval")
"""What the per-step CSV keeps of each record: what the two figures draw and the run table summarises."""


def step_table(results) -> pd.DataFrame:
    """One row per (run, step) of ``results`` (``experiments.llm.results_of``'s list), plus each finished run's final
    held-out accuracy at step = steps (``final_eval`` True); ``figure`` names the figures the run belongs to."""
    import pandas as pd

    from experiments import llm_figures

    rows = [{**row, "figure": "+".join(run.roles)}
            for run, result in results for row in llm_figures.step_rows([(run, result)], run.roles[0])]
    table = pd.DataFrame(rows).reindex(columns=list(STEP_COLUMNS))
    table["final_eval"] = table.final_eval.astype("boolean").fillna(False).astype(bool)
    table["nonfinite"] = table.nonfinite.astype("boolean").fillna(False).astype(bool)
    return table


def rows_of(table: pd.DataFrame, role: str) -> list[dict]:
    """The records of ``role``'s runs as dicts (NaN where a record has no value), as the panels' plot functions
    take them."""
    part = table[table.figure.str.split("+").apply(lambda roles: role in roles)]
    records = part.to_dict("records")
    for r in records:
        for key, value in r.items():
            if isinstance(value, float) and math.isnan(value):
                r[key] = math.nan
    return records


def draw(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Both testbed figures from ``table`` (``step_table``'s columns) into ``out_dir``."""
    import matplotlib.pyplot as plt

    from experiments import llm_figures
    from paper_figs import fig1_cosine, fig3_divergence
    from paper_figs.common import apply_style, panel_letters, save_figure

    apply_style()
    paths = []
    fig1_rows = llm_figures.with_run_means([r for r in rows_of(table, "fig1") if not r["final_eval"]])
    fig, ax = plt.subplots(figsize=(5.4, 2.9))  # room for the key beside the panel
    fig1_cosine.plot_llm(ax, fig1_rows)
    paths += save_figure(fig, out_dir, "fig1_cosine_llm_testbed")
    fig, axes = plt.subplots(3, 1, figsize=(3.6, 7.6))
    fig3_divergence.plot_llm(axes, rows_of(table, "fig3"))
    panel_letters(axes)
    paths += save_figure(fig, out_dir, "fig3_divergence_llm_testbed")
    return paths


@dataclass
class Cli:
    """Draw the LLM testbed's fig1 and fig3 panels from the committed per-step data (or compute it first)."""

    data: str = str(STEPS_CSV.relative_to(ROOT))
    """the per-step CSV to draw from (and, with --compute, to write)"""
    out: str = "docs/figures"
    """folder for fig1_cosine_llm_testbed.{png,pdf} and fig3_divergence_llm_testbed.{png,pdf}"""
    compute: bool = False
    """take the runs of --profile from the run cache (computing missing ones) and write --data first"""
    profile: Literal["quick", "full"] = "full"
    """with --compute: which runs (experiments/llm_figures.py)"""
    jobs: int | None = None
    """with --compute: worker processes (default: one per core, memory permitting)"""


def main(cli: Cli) -> list[Path]:
    import pandas as pd

    from experiments import llm_figures
    from runtime.files import check_output_dir
    from sim.schema import LEGACY_LLM_COLUMNS

    check_output_dir(cli.out, "out")
    data = Path(cli.data)
    if cli.compute:
        from experiments.llm import results_of

        check_output_dir(str(data.parent), "data")
        table = step_table(results_of(llm_figures.runs(cli.profile), jobs=cli.jobs, name="llm testbed"))
        tmp = data.with_suffix(".csv.tmp")
        table.to_csv(tmp, index=False, float_format="%.6g")
        tmp.replace(data)
    elif not data.exists():
        raise SystemExit(f"error: {data} does not exist; make it with --compute (runs the testbed's runs)")
    table = pd.read_csv(data).rename(columns=LEGACY_LLM_COLUMNS)
    paths = draw(table, Path(cli.out))
    print("\n".join(str(p) for p in paths))
    return paths


if __name__ == "__main__":
    main(tyro.cli(Cli))
