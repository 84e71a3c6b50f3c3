"""Each toy figure runs end to end at tiny size and writes its CSV and PNG; fig2, fig4 and fig7 write the numbers of
their golden CSVs (tests/golden_csv.py: within a cross-machine tolerance, discrete decisions exactly)."""

import csv

import pytest

from paper_figs import (
    fig1_cosine,
    fig3_divergence,
    fig4_stability_region,
    fig6_ablation,
    figs1_bandit_snr,
    figs3_staleness_lr,
)
from paper_figs.__main__ import FIGURES, parse_args
from tests.figure_reader import assert_a_reader_understands, capture
from tests.figures import make_figure
from tests.golden_csv import FIGURES as GOLDEN_FIGURES
from tests.golden_csv import GOLDEN_DIR, golden_mismatches


def assert_matches_golden(name: str, out) -> None:
    for file in GOLDEN_FIGURES[name]:
        assert golden_mismatches(out / file, GOLDEN_DIR / file) == [], f"{file} differs from its golden"


def _rows(path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("module", [fig1_cosine, fig3_divergence, fig4_stability_region, fig6_ablation,
                                    figs1_bandit_snr, figs3_staleness_lr])
def test_figure_smoke(module, tmp_path, monkeypatch):
    # the LLM panels of fig1 and fig3 have their own test (tests/llm/test_llm_panels.py)
    units = module.toy_units("smoke") if hasattr(module, "toy_units") else None
    figures = capture(module, monkeypatch)
    make_figure(module.NAME, "smoke", tmp_path, units=units)
    name = module.NAME
    assert figures and all(assert_a_reader_understands(fig, name) is None for fig in figures)
    assert (tmp_path / f"{name}.csv").stat().st_size > 0
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert name in FIGURES
    if name in GOLDEN_FIGURES:
        assert_matches_golden(name, tmp_path)


def test_cli_rejects_unknown_figure():
    with pytest.raises(SystemExit):
        parse_args(["fig99"])


def test_fig2_cosine_vs_staleness_smoke(tmp_path, monkeypatch):
    """Tiny run; the transient window and the theory column are filled whatever the profile."""
    from paper_figs import fig2_cosine_vs_staleness

    figures = capture(fig2_cosine_vs_staleness, monkeypatch)
    make_figure(fig2_cosine_vs_staleness.NAME, "smoke", tmp_path)
    assert figures and all(assert_a_reader_understands(fig, "fig2") is None for fig in figures)
    rows = _rows(tmp_path / f"{fig2_cosine_vs_staleness.NAME}.csv")
    for ext in ("csv", "png", "pdf"):
        assert (tmp_path / f"{fig2_cosine_vs_staleness.NAME}.{ext}").stat().st_size > 0
    stationary = [r for r in rows if r["panel"] == "stationary"]
    assert {int(r["staleness"]) for r in stationary} == set(fig2_cosine_vs_staleness.STALENESS)
    # every step size of the figure is inside the stability region, so the theory value exists (not nan)
    assert all(-1.0 <= float(r["predicted"]) <= 1.0 for r in stationary)
    assert {r["panel"] for r in rows} == {"stationary", "transient", "bandit_gaussian"}
    assert fig2_cosine_vs_staleness.NAME in FIGURES
    assert_matches_golden(fig2_cosine_vs_staleness.NAME, tmp_path)


def test_fig7_bound_smoke(tmp_path, monkeypatch):
    from experiments.profiles import lookup
    from paper_figs import fig7_bound

    figures = capture(fig7_bound, monkeypatch)
    make_figure(fig7_bound.NAME, "smoke", tmp_path)
    assert figures and all(assert_a_reader_understands(fig, "fig7") is None for fig in figures)
    rows = [{k: float(v) if k.startswith(("measured", "bound")) else v for k, v in r.items()}
            for r in _rows(tmp_path / f"{fig7_bound.NAME}.csv")]
    for ext in ("csv", "png", "pdf"):
        assert (tmp_path / f"{fig7_bound.NAME}.{ext}").stat().st_size > 0
    assert (tmp_path / f"{fig7_bound.NAME}_tightness.csv").stat().st_size > 0
    assert len(rows) == len(lookup("bound", "smoke").settings)
    assert all(r["measured_min"] <= r["measured_avg"] <= r["bound"] for r in rows)  # the theorem, at tiny size
    assert fig7_bound.NAME in FIGURES
    assert_matches_golden(fig7_bound.NAME, tmp_path)


def test_figures_registry_order():
    assert FIGURES == ["fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region",
                       "fig5_llm_grpo",
                       "fig6_ablation", "fig7_bound", "fig8_tuned", "fig9_early_warning", "fig10_verdict",
                       "figs1_bandit_snr", "figs2_llm_signature", "figs3_staleness_lr"]
