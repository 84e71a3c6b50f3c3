"""fig7's runs: ``theory.convergence.check_bound`` (GAC-SGD batched over seeds, the a-priori v2 bound beside the
measured kept energy) per profile, one row per setting with its legend name and whether the bound holds.
"""

from __future__ import annotations

from experiments.profiles import lookup
from theory import convergence


def mode_name(row: dict) -> str:
    """Legend name: the mode as in ``check_bound``'s settings, with GAC's threshold τ in parentheses."""
    return "naive" if row["mode"] == "none" else f"{row['mode']} ({row['threshold']})"


def run_rows(profile: str) -> list[dict]:
    """One row per setting of ``profile``: check_bound's columns, the legend name, the sizes and ``holds_kept``."""
    p = lookup("bound", profile)
    settings, dim, steps, seeds = list(p.settings) or convergence.DEFAULT_SETTINGS, p.dim, p.steps, p.seeds
    rows = convergence.check_bound(settings, dim=dim, steps=steps, seeds=seeds)
    out = []
    for row in rows:
        row = {"random_staleness": False, **row}
        out.append({**row, "label": mode_name(row), "dim": dim, "steps": steps, "seeds": seeds,
                    "holds_kept": bool(row["measured_kept"] <= row["bound"])})
    return out
