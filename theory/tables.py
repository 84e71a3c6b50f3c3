"""`python -m theory.tables [stability|cosine|bound|stationary|assumptions|gac|rho|all]`: the tables as Markdown.

Each table is computed here from the theory functions and their independent checks (no cached numbers).
The bound table runs the full ``convergence.DEFAULT_SETTINGS`` grid; the stationary table (runs of 5000–16 000
steps) and the assumptions table take longest.
"""

from __future__ import annotations

import sys
from typing import Literal

import tyro


def stability_table(max_staleness: int = 16) -> str:
    from theory import stability

    lines = ["| s | a*(s) closed form | a*(s) numeric (bisection on roots) | abs diff | mean-square a, s_t ~ U{0..s} |",
             "|---|---|---|---|---|"]
    for s in range(max_staleness + 1):
        closed = float(stability.stability_boundary_closed_form(s))
        numeric = stability.stability_boundary(s)
        random = stability.mean_square_boundary_random(s)
        lines.append(f"| {s} | {closed:.12f} | {numeric:.12f} | {abs(closed - numeric):.1e} | {random:.6f} |")
    return "\n".join(lines)


def cosine_table() -> str:
    from theory import cosine, stability

    settings = [(frac * float(stability.stability_boundary_closed_form(s)), name, s, 1.0)
                for frac, name, s in cosine.MC_SETTINGS]
    rows = cosine.check_cosine_against_simulation(settings, dim=1000, steps=3000, burn_in=1000, seed=0)
    lines = ["| η | spectrum | s | ηλ_max / a*(s) | predicted | simulated mean cos | simulated Σ-ratio | abs err |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['eta']:.4f} | {r['spectrum']} | {r['staleness']} | {r['top_a_over_boundary']:.2f} | "
                     f"{r['predicted']:.4f} | {r['simulated']:.4f} | {r['simulated_ratio']:.4f} | "
                     f"{r['abs_error']:.4f} |")
    return "\n".join(lines)


def bound_table() -> str:
    from theory import convergence

    rows = convergence.check_bound(convergence.DEFAULT_SETTINGS)
    lines = ["| noise σ_n | problem | s | η/η_max | mode (τ) | GAC acted | bound (a priori) | kept avg_t | "
             "avg_t E‖∇f‖² | bound/kept |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = f"U{{0..{r['staleness']}}}" if r.get("random_staleness") else str(r["staleness"])
        mode = r["mode"] if r["mode"] == "none" else f"{r['mode']} ({r['threshold']})"
        lines.append(f"| {r['noise_std']} | {r['kind']} | {s} | {r['eta_fraction']} | {mode} | {r['acted']:.2f} | "
                     f"{r['bound']:.4g} | {r['measured_kept']:.4g} | {r['measured_avg']:.4g} | "
                     f"{r['bound_over_kept']:.1f} |")
    return "\n".join(lines)


def stationary_table() -> str:
    from theory import convergence

    rows = convergence.stationary_tightness()
    lines = ["| s | mode | η/η_max | T (stationary run) | transient: bound / kept (T = 300) | stationary kept | "
             "stationary bound | stationary bound/kept |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['staleness']} | {r['mode']} | {r['fraction']} | {r['steps']} | "
                     f"{r['transient_bound']:.4g} / {r['transient_kept']:.4g} = {r['transient_ratio']:.1f} | "
                     f"{r['stationary_kept']:.4g} | {r['stationary_bound']:.4g} | {r['stationary_ratio']:.1f} |")
    return "\n".join(lines)


def assumptions_table() -> str:
    from theory import convergence

    lines = ["| case | breaks | mode | kept (2nd half) | bound | kept/bound |", "|---|---|---|---|---|---|"]
    for case, (breaks, _) in convergence.ASSUMPTION_CASES.items():
        for mode in ("project",) if case == "reference_uses_noise" else ("none", "project"):
            r = convergence.run_assumption_case(case, mode)
            lines.append(f"| {case} | {breaks} | {mode} | {r['kept']:.4g} | {r['bound']:.4g} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def gac_table(stalenesses=(1, 2, 4, 8, 16, 32), rhos=(0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95)) -> str:
    from theory import gac_stability, stability

    lines = ["| s | a*(s) | 1/cos(π/(2s+3)) | " + " | ".join(f"ρ = {r}" for r in rhos) + " |",
             "|---" * (len(rhos) + 3) + "|"]
    for s in stalenesses:
        ratios = " | ".join(f"{gac_stability.step_cut_ratio(s, r):.3f}" for r in rhos)
        lines.append(f"| {s} | {float(stability.stability_boundary_closed_form(s)):.4f} | "
                     f"{gac_stability.top_mode_limit(s)['a_max']:.4f} | {ratios} |")
    return "\n".join(lines)


def rho_table() -> str:
    from theory import gac_stability

    rows = gac_stability.check_self_consistent_rho(dim=2000, steps=3000, seeds=4)
    lines = ["| s | η·λ_max / a*(s) | ρ* (Lyapunov with filter) | measured mean removed coefficient | abs diff |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['staleness']} | {r['fraction']} | {r['predicted']:.4f} | {r['measured']:.4f} | "
                     f"{r['abs_error']:.4f} |")
    return "\n".join(lines)


TABLES = {"stability": stability_table, "cosine": cosine_table, "bound": bound_table,
          "stationary": stationary_table, "assumptions": assumptions_table, "gac": gac_table, "rho": rho_table}
TableName = Literal["all", "stability", "cosine", "bound", "stationary", "assumptions", "gac", "rho"]


def print_tables(names: tyro.conf.Positional[tuple[TableName, ...]] = ("all",)) -> None:
    """Print theory's check tables as markdown (README/RESULTS). NAMES: which tables (default all)."""
    for name in TABLES if "all" in names or not names else names:
        print(f"\n### {name}\n")
        print(TABLES[name]())


def main(argv: list[str] | None = None) -> int:
    tyro.cli(print_tables, args=argv, prog="python -m theory.tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
