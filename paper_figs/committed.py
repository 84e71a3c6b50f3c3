"""Redraw the figures whose data is committed in docs/data, without a run: fig5_llm_grpo (the LLM sweep's run
table), fig10_verdict (the committed LLM and toy verdicts: the full profile), figs2_llm_signature (the signature
map's runs) and figs3_staleness_lr (the full profile's boundary table and fits). fig5's and figs2's quick profiles
draw their committed CSVs through ``draw_or_say`` (their runs take hours on a CPU).

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
DATA = ROOT / "docs" / "data"
NAMES = ("fig5_llm_grpo", "fig10_verdict", "figs2_llm_signature", "figs3_staleness_lr")
RUN_TABLES = ("fig5_llm_grpo", "figs2_llm_signature")
"""The figures drawn from one committed CSV of their runs, docs/data/NAME.csv: the NAME.csv a full run writes."""


def missing(name: str) -> str | None:
    """One line saying that figure ``name``'s committed CSV is missing and which command makes it; None when it is
    there."""
    path = DATA / f"{name}.csv"
    if name not in RUN_TABLES or path.exists():
        return None
    return (f"{name}: no committed data at {path}; make it with `python -m paper_figs {name} "
            f"--profile full` and copy that run's {name}.csv there")


def draw(name: str, out_dir: Path) -> list[Path]:
    """Figure ``name`` from its committed data into ``out_dir`` (its PNG, PDF and CSVs); a one-line ValueError
    (``missing``) when that data is not there."""
    if (line := missing(name)) is not None:
        raise ValueError(line)
    if name == "fig10_verdict":
        from paper_figs import fig10_verdict

        return fig10_verdict.plot(fig10_verdict.committed_results(), out_dir)
    if name in RUN_TABLES:
        import pandas as pd

        from paper_figs.driver import module

        # Every float read back exactly: pandas 3 does by default (and deprecates the option), older ones need it.
        exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
        rows = pd.read_csv(DATA / f"{name}.csv", keep_default_na=False, na_values=["nan", "NaN", ""],
                           **exact).to_dict("records")
        return module(name).draw(rows, out_dir)
    if name == "figs3_staleness_lr":
        from paper_figs import figs3_staleness_lr

        return figs3_staleness_lr.draw(*figs3_staleness_lr.committed_tables(), out_dir)
    raise ValueError(f"no committed data for figure {name!r}; choose from {', '.join(NAMES)}")


def draw_or_say(name: str, out_dir: Path, log=print) -> list[Path]:
    """``draw(name, out_dir)``, or, when its committed CSV is missing, the one line of ``missing`` and no file (the
    other figures of a run go on)."""
    if (line := missing(name)) is not None:
        log(line, flush=True)
        return []
    return draw(name, out_dir)


@dataclass(frozen=True)
class Cli:
    """Redraw the figures whose data is committed in docs/data (no run)."""

    names: tyro.conf.Positional[tuple[Annotated[Literal[NAMES], choice("a figure name", NAMES)], ...]] = NAMES
    """the figures to redraw (default: all of them)"""
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
    for name in cli.names:
        if (line := missing(name)) is not None:
            fail(PROG, line)
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
