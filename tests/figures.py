"""One figure at a test profile by the figures' own road (``paper_figs.driver.make_figures``)."""

from pathlib import Path

from paper_figs import driver


def make_figure(name: str, profile: str, out: Path, jobs: int = 1, force: bool = False, units: list | None = None,
                executor=None) -> list[Path]:
    """Figure ``name``'s files written into ``out``: its units (default: all it declares; a test may give fewer)
    computed through the cache on ``jobs`` workers of ``executor``, then its plot."""
    args = driver.FigureArgs((name,), profile=profile, out=Path(out), force=force)
    declared = None if units is None else {name: units}
    return driver.make_figures(args, jobs, log=lambda *a, **k: None, declared=declared, executor=executor)[name]
