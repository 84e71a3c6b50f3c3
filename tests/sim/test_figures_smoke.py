"""Each toy figure runs end to end at tiny size and writes its CSV and PNG."""

import pytest

from paper_figs import fig1_cosine, fig3_divergence, fig4_stability_region, fig6_ablation, figs1_bandit_snr
from paper_figs.__main__ import FIGURES, parse_args


@pytest.mark.parametrize("module", [fig1_cosine, fig3_divergence, fig4_stability_region, fig6_ablation,
                                    figs1_bandit_snr])
def test_figure_smoke(module, tmp_path):
    module.main("smoke", tmp_path)
    name = module.NAME
    assert (tmp_path / f"{name}.csv").stat().st_size > 0
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert name in FIGURES


def test_cli_rejects_unknown_figure():
    with pytest.raises(SystemExit):
        parse_args(["fig99"])
