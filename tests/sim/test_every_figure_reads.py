"""Every figure of paper_figs, drawn once from small data and read as a reader would (tests/figure_reader.py: words
from tests/data/figure_words.txt or mathtext, never code; a letter on every panel; a band only over >= 3 runs and
inside its metric's range; no legend over data; no text over another).

The small data: the toy figures at the smoke profile; fig5, fig8 and fig9 on tiny GRPO runs (the quick profile's code
on the tiny model); the figures whose data is committed, from docs/data (fig10, figs2, figs3, the LLM testbed's, the
high-SNR study's and the SNR figure: what docs/figures shows); fig1 and fig3 with their toy panels beside the
committed testbed's LLM panel (2 of its warm starts in fig1, so each is a line; all 8 in fig3, so bands). The toy
figures' files are checked too, and fig2, fig4 and fig7's CSVs against their goldens (tests/golden_csv.py).
"""

import csv
import functools
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

import runtime.cache
from paper_figs import committed, common, driver
from paper_figs.__main__ import FIGURES, parse_args
from tests.figure_reader import BAND, assert_a_reader_understands
from tests.figures import make_figure
from tests.golden_csv import FIGURES as GOLDEN_FIGURES
from tests.golden_csv import GOLDEN_DIR, golden_mismatches

TOYS = ("fig2_cosine_vs_staleness", "fig4_stability_region", "fig6_ablation", "fig7_bound", "figs1_bandit_snr",
        "figs3_staleness_lr")
COMMITTED = ("fig1_cosine_llm_testbed", "fig3_divergence_llm_testbed", "fig1_cosine_llm_highsnr",
             "fig3_divergence_llm_highsnr", "llm_snr", "figs3_staleness_lr committed", "fig10_verdict without tuning")
DRAWN = (*FIGURES, *COMMITTED)
"""Every figure drawn here: each module of paper_figs (some twice, from two sources)."""
DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
TINY_SWEEP = dict(base=dict(digits=1, steps=3, prompts_per_step=4, group_size=4, minibatches=2, eval_every=2,
                            eval_problems=8, temperature=0.5, ratio_to="proximal"),
                  seeds=(0,), main_lr=3e-3, small_lrs=(1e-3,), grid={1e-3: (0, 2), 3e-3: (0, 2), 1e-2: (0,)},
                  line_staleness=(0, 2), high_staleness=2)
"""fig5's and fig9's LLM sweep on the tiny model (experiments.llm's profile shape, as tests/llm/test_experiments.py)."""


@functools.cache
def committed_testbed_steps() -> pd.DataFrame:
    from sim.schema import LEGACY_LLM_COLUMNS

    return pd.read_csv(DATA / "llm_figures_steps.csv").rename(columns=LEGACY_LLM_COLUMNS)


def with_committed_llm_panel(name: str, out: Path, warm_seeds=None) -> None:
    """Figure ``name`` (fig1 or fig3) with its toy panels at the smoke profile and its LLM panel from the committed
    testbed's steps (``warm_seeds`` of them; None: all)."""
    from experiments import llm_figures
    from paper_figs import llm_testbed
    from paper_figs.common import Panel
    from runtime.graph import compute

    table = committed_testbed_steps()
    if warm_seeds is not None:
        table = table[table.warm_seed.isin(warm_seeds)]
    rows = [dict(r, sim="llm", label=r["arm"]) for r in llm_testbed.rows_of(table, name[:4])]
    if name == "fig1_cosine":
        rows = llm_figures.with_run_means([r for r in rows if not r["final_eval"]])
    module = driver.module(name)
    llm = next(p for p in module.PANELS if p.name == "llm")
    panels = [p for p in module.PANELS if p.name != "llm"] + [Panel("llm", lambda results: rows, llm.plot, llm.n_axes)]
    units = module.toy_units("smoke")
    values = compute(units, 1, log=lambda *a, **k: None)
    module.plot(common.Results("smoke", "cpu", False, tuple((u, values[u.name]) for u in units)), out, panels=panels)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, tiny_checkpoint):
    """({name: Figure}, {name: its output folder}, the drawings, which drawing makes a figure) for every figure of
    ``DRAWN``, each drawn on first use (under the patches below), saved and kept open."""
    from experiments import llm, profiles, tuning
    from experiments.verdict import committed_verdict
    from paper_figs import fig10_verdict, llm_highsnr, llm_snr, llm_testbed

    root = tmp_path_factory.mktemp("figures")
    saved = []
    real = common.save_figure

    def keep(fig, out_dir, name):
        """The toys' files are saved (their test reads them); the other figures only take the layout saving gives."""
        saved.append((name, fig))
        if name in TOYS:
            return real(fig, out_dir, name)
        if fig.get_layout_engine() is None:
            fig.set_layout_engine("constrained")
        return []

    recipes: dict = {}

    def draw(key, how) -> None:
        """Register ``how(folder)``, which draws ``key`` (or, where it saves several, each under its name); it runs
        when a test first asks for one of them, so each figure's cost is its own test's."""
        recipes[key] = how

    def make(key) -> None:
        out[key] = root / key.replace(" ", "_")
        out[key].mkdir()
        saved.clear()
        recipes[key](out[key])
        figures.update({key: saved[0][1]} if len(saved) == 1 else dict(saved))

    source = {"fig1_cosine_llm_testbed": "llm_testbed", "fig3_divergence_llm_testbed": "llm_testbed",
              "fig1_cosine_llm_highsnr": "llm_highsnr", "fig3_divergence_llm_highsnr": "llm_highsnr"}

    class Drawn(dict):
        """Figures (or output folders) by name, each drawn on first use."""

        def __missing__(self, name):
            make(source.get(name, name))
            return dict.__getitem__(self, name)

    figures, out = Drawn(), Drawn()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runtime.cache, "CACHE_DIR", root / "cache")  # one cache: fig9 reads fig1, fig3, fig5's runs
        mp.setenv("GAC_LAB_JOBS", "1")
        mp.delenv("GAC_LAB_FORCE", raising=False)
        mp.setattr(common.plt, "close", lambda *a, **k: None)
        for name in FIGURES:  # imported before common is patched, or a module would bind the patched one for good
            mp.setattr(driver.module(name), "save_figure", keep)
        mp.setattr(common, "save_figure", keep)
        tiny = {**TINY_SWEEP["base"], "size": "tiny", "model": str(tiny_checkpoint)}
        mp.setitem(profiles.LLM_SWEEP, "test", profiles.LLMSweep(**{**TINY_SWEEP, "base": tiny}))
        mp.setattr(tuning, "LLM_METHODS", ("bapo",))
        mp.setitem(profiles.LLM_TUNING, "smoke", profiles.LLMTuning(
            base={**tiny, "steps": 2}, staleness=(2,), lrs=(1e-3, 3e-3, 1e-2, 3e-2), tuning_seeds=1,
            reporting_seeds=1))
        for name in TOYS:
            module = driver.module(name)
            units = module.toy_units("smoke") if hasattr(module, "toy_units") else None
            draw(name, lambda folder, name=name, units=units: make_figure(name, "smoke", folder, units=units))
        draw("fig1_cosine", lambda folder: with_committed_llm_panel("fig1_cosine", folder, warm_seeds=(1, 2)))
        draw("fig3_divergence", lambda folder: with_committed_llm_panel("fig3_divergence", folder))
        draw("fig5_llm_grpo", lambda folder: make_figure("fig5_llm_grpo", "test", folder))
        toys = [u for name in ("fig1_cosine", "fig3_divergence") for u in driver.module(name).toy_units("smoke")]
        sweep = [llm.run_unit(r) for r in llm.sweep("test")]
        draw("fig9_early_warning",
             lambda folder: make_figure("fig9_early_warning", "smoke", folder, units=toys + sweep))
        draw("fig8_tuned", lambda folder: make_figure("fig8_tuned", "smoke", folder))
        draw("fig10_verdict", lambda folder: committed.draw("fig10_verdict", folder))
        draw("figs2_llm_signature", lambda folder: committed.draw("figs2_llm_signature", folder))
        draw("figs3_staleness_lr committed", lambda folder: committed.draw("figs3_staleness_lr", folder))
        draw("llm_testbed", lambda folder: llm_testbed.draw(committed_testbed_steps(), folder))
        draw("llm_highsnr", lambda folder: llm_highsnr.draw(
            pd.read_csv(DATA / "llm_highsnr_runs.csv"), pd.read_csv(DATA / "llm_highsnr_runs_steps.csv",
                                                                    low_memory=False), folder))
        draw("llm_snr", lambda folder: llm_snr.draw(pd.read_csv(DATA / "llm_snr.csv"), folder))
        verdict = committed_verdict(fig10_verdict.COMMITTED)

        def without_tuning(folder):
            with pytest.MonkeyPatch.context() as only_here:  # the quick shape of (d), for this drawing alone
                only_here.setattr(fig10_verdict, "llm_verdict", lambda results: {**verdict, "tuning": []})
                fig10_verdict.plot(fig10_verdict.committed_results(), folder)

        draw("fig10_verdict without tuning", without_tuning)
        yield figures, out, recipes, source
    common.plt.close("all")


@pytest.mark.parametrize("name", DRAWN)
def test_a_reader_understands(drawn, name):
    figures = drawn[0]
    assert_a_reader_understands(figures[name], name)


def test_every_figure_has_a_drawing(drawn):
    _, _, recipes, source = drawn
    assert {source.get(name, name) for name in DRAWN} == set(recipes)  # and each is drawn by its reader test


def test_llm_spread_is_a_band_over_eight_warm_starts_and_each_warm_starts_line_over_two(drawn):
    figures = drawn[0]
    bands = [c for ax in figures["fig3_divergence"].axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert bands and {BAND.fullmatch(c.get_gid())[1] for c in bands} == {"8"}  # 8 warm starts in fig3's LLM panel
    llm = next(ax for ax in figures["fig1_cosine"].axes if "small LLM" in ax.get_title())
    assert not [c for c in llm.collections if isinstance(c, PolyCollection)]
    thin = [line for line in llm.lines if line.get_linewidth() == 0.5]
    assert len(thin) == 2 * 5  # each of the 2 warm starts of each of the 5 stalenesses


@pytest.mark.parametrize("name", TOYS)
def test_toy_figure_writes_its_files(drawn, name):
    out = drawn[1]
    for ext in ("csv", "png", "pdf"):
        assert (out[name] / f"{name}.{ext}").stat().st_size > 0
    for file in GOLDEN_FIGURES.get(name, ()):
        assert golden_mismatches(out[name] / file, GOLDEN_DIR / file) == [], f"{file} differs from its golden"


def _rows(path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_fig2_fills_the_transient_window_and_the_theory_column(drawn):
    from paper_figs import fig2_cosine_vs_staleness

    rows = _rows(drawn[1]["fig2_cosine_vs_staleness"] / "fig2_cosine_vs_staleness.csv")
    stationary = [r for r in rows if r["panel"] == "stationary"]
    assert {int(r["staleness"]) for r in stationary} == set(fig2_cosine_vs_staleness.STALENESS)
    # every step size of the figure is inside the stability region, so the theory value exists (not nan)
    assert all(-1.0 <= float(r["predicted"]) <= 1.0 for r in stationary)
    assert {r["panel"] for r in rows} == {"stationary", "transient", "bandit_gaussian"}


def test_fig7_bound_holds_on_every_smoke_setting(drawn):
    from experiments.profiles import lookup

    out = drawn[1]["fig7_bound"]
    rows = [{k: float(v) if k.startswith(("measured", "bound")) else v for k, v in r.items()}
            for r in _rows(out / "fig7_bound.csv")]
    assert (out / "fig7_bound_tightness.csv").stat().st_size > 0
    assert len(rows) == len(lookup("bound", "smoke").settings)
    assert all(r["measured_min"] <= r["measured_avg"] <= r["bound"] for r in rows)  # the theorem, at tiny size


def test_cli_rejects_unknown_figure():
    with pytest.raises(SystemExit):
        parse_args(["fig99"])


def test_figures_registry_order():
    assert FIGURES == ["fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region",
                       "fig5_llm_grpo",
                       "fig6_ablation", "fig7_bound", "fig8_tuned", "fig9_early_warning", "fig10_verdict",
                       "figs1_bandit_snr", "figs2_llm_signature", "figs3_staleness_lr"]
