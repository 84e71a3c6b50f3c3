"""--style talk: one 16:9 PNG per panel with every font >= TALK_MIN_FONT, from the paper figure's own artists and the
same cached results and CSV; a bad --style is one line before any work."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from PIL import Image  # noqa: E402

import paper_figs.__main__ as figs_cli  # noqa: E402
from paper_figs import common  # noqa: E402
from paper_figs.driver import FIGURES  # noqa: E402


def _collect_slides(monkeypatch) -> list:
    """Every slide ``save_talk_panels`` saves (the Figure objects, after saving)."""
    slides, talk_panels = [], common.talk_panels

    def keep(fig):
        slides.extend(made := talk_panels(fig))
        return made

    monkeypatch.setattr(common, "talk_panels", keep)
    return slides


def _texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.slow
@pytest.mark.parametrize("name, panels", [("fig4_stability_region", 2), ("fig5_llm_grpo", 6)])
def test_talk_dry_run_writes_one_16_9_slide_per_panel_from_the_paper_runs(name, panels, tmp_path, monkeypatch,
                                                                           capsys):
    assert figs_cli.main([name, "--dry-run", "--out", str(tmp_path)]) == 0  # the paper style computes the runs
    capsys.readouterr()
    slides = _collect_slides(monkeypatch)
    assert figs_cli.main([name, "--dry-run", "--style", "talk", "--out", str(tmp_path)]) == 0
    assert "0 to compute" in capsys.readouterr().out  # the talk style reads the same cached results: no extra run

    talk = tmp_path / "dry_run" / "talk"
    pngs = sorted(p.name for p in talk.glob("*.png"))
    assert pngs == [f"{name}_{common.panel_letter(i)}.png" for i in range(panels)]
    assert len(slides) == panels
    for png in pngs:
        width, height = Image.open(talk / png).size
        assert abs(width * 9 - height * 16) <= 16, (png, width, height)  # 16:9 to the pixel
    for slide in slides:
        assert tuple(slide.get_size_inches()) == pytest.approx(common.TALK_SIZE)
        sizes = {t.get_text(): t.get_fontsize() for t in _texts(slide)}
        assert sizes and min(sizes.values()) >= common.TALK_MIN_FONT, {k: v for k, v in sizes.items() if v < 18}
    # the same CSV as the paper style, byte for byte; no paper PNG or PDF among the slides
    assert (talk / f"{name}.csv").read_bytes() == (tmp_path / "dry_run" / f"{name}.csv").read_bytes()
    assert not (talk / f"{name}.png").exists() and not (talk / f"{name}.pdf").exists()


@pytest.mark.parametrize("argv", [["--style", "poster"], ["--style=slides"], ["--style", ""]])
def test_bad_style_is_one_line_before_any_work(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figs_cli, "declare", lambda *a, **k: pytest.fail("runs were declared"))
    monkeypatch.setattr(figs_cli, "make_figures", lambda *a, **k: pytest.fail("a figure ran"))
    with pytest.raises(SystemExit) as exit_info:
        figs_cli.main(["fig7_bound", *argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--style must be one of paper, talk" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_all_takes_the_style_and_writes_beside_the_paper_figures(tmp_path):
    args = figs_cli.parse_args(["all", "--style", "talk", "--out", str(tmp_path)])
    assert args.names == tuple(FIGURES) and args.style == "talk" and args.out == tmp_path / "talk"
    assert figs_cli.parse_args(["all", "--out", str(tmp_path)]).out == tmp_path  # paper: where it always was
    assert figs_cli.parse_args(["fig4_stability_region", "--style", "talk", "--dry-run", "--out", str(tmp_path)]
                               ).out == tmp_path / "dry_run" / "talk"


def _paper_figure():
    """Like fig3 (a column of two axes per subfigure, the title on the top one) beside a shared-y pair with one
    colour bar for both (like fig4) and a figure legend (like fig9)."""
    fig = plt.figure(figsize=(6.6, 4.0), layout="constrained")
    left, right = fig.subfigures(1, 2)
    top, bottom = left.subplots(2, 1)
    steps = np.arange(10.0)
    top.plot(steps, steps**2, label="sync")
    top.set(title="noisy quadratic", ylabel="loss")
    bottom.plot(steps, np.sqrt(steps), label="sync")
    bottom.set(xlabel="step", ylabel="‖g‖")
    first, second = right.subplots(1, 2, sharey=True)
    mesh = first.pcolormesh(np.arange(3.0), np.arange(2.0), np.array([[0.0, 0.5, 1.0], [1.0, 0.5, 0.0]]),
                            cmap="Reds", vmin=0, vmax=1, shading="nearest")
    second.pcolormesh(np.arange(3.0), np.arange(2.0), np.ones((2, 3)), cmap="Reds", vmin=0, vmax=1,
                      shading="nearest")
    first.set(ylabel="staleness s", title="naive")
    second.set(title="gac")
    right.colorbar(mesh, ax=[first, second], label="share diverged")
    fig.legend(*top.get_legend_handles_labels(), loc="outside upper center")
    fig.suptitle("a figure-wide title")
    return fig, (top, bottom, first, second)


def test_each_panel_alone_on_a_slide_with_its_title_labels_key_and_data():
    fig, originals = _paper_figure()
    slides = common.talk_panels(fig)
    assert len(slides) == 4  # the colour bar is no panel of its own
    for slide, original in zip(slides, originals, strict=True):
        panels = [ax for ax in slide.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == 1
        (ax,) = panels
        for line, kept in zip(original.get_lines(), ax.get_lines(), strict=True):  # the same data
            np.testing.assert_array_equal(line.get_xydata(), kept.get_xydata())
        slide.canvas.draw()
        assert min(t.get_fontsize() for t in _texts(slide)) >= common.TALK_MIN_FONT
        # everything on the slide: the axes with their labels and colour bar, the figure's legend and title
        renderer = slide.canvas.get_renderer()
        for box in [a.get_tightbbox(renderer) for a in slide.axes] + [
                artist.get_window_extent(renderer) for artist in (*slide.legends, *slide.texts)]:
            assert box.x0 >= -1 and box.y0 >= -1, box
            assert box.x1 <= slide.bbox.width + 1 and box.y1 <= slide.bbox.height + 1, box
        plt.close(slide)
    top, bottom, first, second = (next(ax for ax in s.axes if ax.get_label() != "<colorbar>") for s in slides)
    assert bottom.get_title() == "noisy quadratic"  # borrowed from the panel above it in its column
    assert second.get_ylabel() == "staleness s"  # borrowed from the axes it shares y with
    assert any(t.get_visible() and t.get_text() for t in second.get_yticklabels())
    for slide in slides[2:]:  # the shared colour bar goes with both panels that use its scale
        (bar,) = [ax for ax in slide.axes if ax.get_label() == "<colorbar>"]
        assert bar.get_ylabel() == "share diverged"
    assert all(slide.legends for slide in slides)  # the figure legend is on every slide
    assert bottom.get_legend() is None  # its one label is in the figure legend already
    plt.close(fig)
