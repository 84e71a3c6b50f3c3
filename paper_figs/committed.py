"""Redraw the figures whose data is committed in docs/data, without a run: fig10_verdict (the committed LLM and toy
verdicts: the full profile), figs2_llm_signature (the quick profile's runs) and figs3_staleness_lr (the full profile's
boundary table and fits).

``python -m paper_figs.committed [NAME ...] [--out docs/figures]`` writes NAME.png and NAME.pdf into --out (the CSVs a
figure writes beside them stay in a temporary folder: their data is the committed one). The LLM testbed, high-SNR and
SNR figures have their own commands (``paper_figs.llm_testbed``, ``paper_figs.llm_highsnr``, ``paper_figs.llm_snr``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from runtime.cli import choice, folder

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("fig10_verdict", "figs2_llm_signature", "figs3_staleness_lr")


def draw(name: str, out_dir: Path) -> list[Path]:
    """Figure ``name`` from its committed data into ``out_dir`` (its PNG, PDF and CSVs)."""
    if name == "fig10_verdict":
        from paper_figs import fig10_verdict

        return fig10_verdict.plot(fig10_verdict.committed_results(), out_dir)
    if name == "figs2_llm_signature":
        import pandas as pd

        from paper_figs import figs2_llm_signature

        rows = pd.read_csv(ROOT / "docs" / "data" / f"{name}.csv", keep_default_na=False,
                           na_values=["nan", "NaN", ""]).to_dict("records")
        return figs2_llm_signature.draw(rows, out_dir)
    if name == "figs3_staleness_lr":
        from paper_figs import figs3_staleness_lr

        return figs3_staleness_lr.draw(*figs3_staleness_lr.committed_tables(), out_dir)
    raise ValueError(f"no committed data for figure {name!r}; choose from {', '.join(NAMES)}")


@dataclass(frozen=True)
class Cli:
    """Redraw the figures whose data is committed in docs/data (no run)."""

    names: tyro.conf.Positional[tuple[Annotated[Literal[NAMES], choice("a figure name", NAMES)], ...]] = NAMES
    """the figures to redraw (default: all three)"""
    out: Annotated[Path, folder("--out")] = ROOT / "docs" / "figures"
    """folder for NAME.png and NAME.pdf"""


PROG = "python -m paper_figs.committed"


def main(cli: Cli) -> list[Path]:
    from runtime.cli import fail
    from runtime.files import check_output_dir

    try:
        check_output_dir(cli.out, "--out")
    except ValueError as err:
        fail(PROG, str(err))
    cli.out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in cli.names:
        with tempfile.TemporaryDirectory() as staging:
            for path in draw(name, Path(staging)):
                if path.suffix in (".png", ".pdf"):
                    written.append(Path(shutil.copy2(path, cli.out / path.name)))
    print("\n".join(str(p) for p in written))
    return written


if __name__ == "__main__":
    from runtime.cli import parse

    main(parse(Cli, None, prog=PROG))
