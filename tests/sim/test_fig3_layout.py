"""fig3 gives every panel as many axes as it draws on: a three-axis panel beside two-axis ones leaves none empty."""

import matplotlib.pyplot as plt

from paper_figs import fig3_divergence
from paper_figs.common import Panel, Results


def _panel(name: str, n_axes: int) -> Panel:
    rows = [{"sim": name, "label": "sync", "staleness": 0, "seed": 0, "step": step, "objective": 1.0 / (1 + step),
             "grad_norm": 1.0, "diverged": False, "collapsed": False} for step in range(3)]

    def plot(axes, rows):
        assert len(axes) == (n_axes or 2)  # the panel gets exactly the axes it draws on
        for ax in axes:
            ax.plot([r["step"] for r in rows], [r["objective"] for r in rows], label="sync")

    return Panel(name, lambda results: rows, plot, n_axes=n_axes)


def test_no_empty_axes_beside_a_taller_panel(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(fig3_divergence, "save_figure", lambda fig, out, name: saved.append(fig) or [])
    panels = [_panel("quadratic", 0), _panel("bandit_gaussian", 2), _panel("llm", 3)]
    fig3_divergence.plot(Results("test"), tmp_path, panels=panels)
    (fig,) = saved
    axes = fig.get_axes()
    assert len(axes) == 2 + 2 + 3
    assert all(ax.axison and ax.has_data() for ax in axes)
    plt.close(fig)


def test_summary_counts_llm_collapses_and_says_so_where_the_rows_do_not_record_them():
    """The LLM's failure is a collapse (a run may collapse and stay finite); rows drawn from a CSV without the column
    give no count rather than a zero."""
    def rows(sim, **extra):
        return [{"sim": sim, "label": "naive s=16", "staleness": 16, "seed": k, "step": 5, "objective": 0.1,
                 "nonfinite": False, **extra} for k in range(2)]

    toy, = fig3_divergence.summarize(rows("quadratic"))
    assert (toy["failed"], toy["failed_seeds"]) == ("diverged", 0)
    collapsed, = fig3_divergence.summarize(rows("llm", collapsed=True))
    assert (collapsed["failed"], collapsed["failed_seeds"], collapsed["seeds"]) == ("collapsed", 2, 2)
    unknown, = fig3_divergence.summarize(rows("llm"))
    assert unknown["failed_seeds"] is None
