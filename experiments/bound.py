"""fig7's runs: ``theory.convergence.check_bound`` (GAC-SGD batched over seeds, the a-priori v2 bound beside the
measured kept energy) per profile, one row per setting with its legend name and whether the bound holds.
"""

from __future__ import annotations

from theory import convergence

SMOKE_SETTINGS = [
    {"kind": "quadratic", "staleness": 2, "eta_fraction": 0.5, "mode": mode, "threshold": tau, "noise_std": 1.0}
    for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))]
# (settings, dim, steps T, seeds) per profile; quick and full run the whole grid (the theory README's table
# is the quick profile: check_bound's defaults), full averages over 4x more seeds.
PROFILES = {"smoke": (SMOKE_SETTINGS, 10, 30, 4),
            "quick": (convergence.DEFAULT_SETTINGS, 50, 300, 32),
            "full": (convergence.DEFAULT_SETTINGS, 50, 300, 128)}


def mode_name(row: dict) -> str:
    """Legend name: the mode as in ``check_bound``'s settings, with GAC's threshold τ in parentheses."""
    return "naive" if row["mode"] == "none" else f"{row['mode']} ({row['threshold']})"


def run_rows(profile: str) -> list[dict]:
    """One row per setting of ``profile``: check_bound's columns, the legend name, the sizes and ``holds_kept``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    settings, dim, steps, seeds = PROFILES[profile]
    rows = convergence.check_bound(settings, dim=dim, steps=steps, seeds=seeds)
    out = []
    for row in rows:
        row = {"random_staleness": False, **row}
        out.append({**row, "label": mode_name(row), "dim": dim, "steps": steps, "seeds": seeds,
                    "holds_kept": bool(row["measured_kept"] <= row["bound"])})
    return out
