"""demo_flat: the stale-aligned effect on a flat noisy quadratic (sim.flat_demo), sync vs async vs GAC."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

import gac
from paper_figs.common import apply_style, method_color, save_figure, write_csv
from sim.flat_demo import run_flat_demo

RUNS = [("sync", 0, None), ("none", 8, None), ("gac", 8, gac.GACConfig(threshold=0.0))]


def main(profile: str, out_dir: Path, device: str = "cpu") -> None:
    steps, seeds = (300, 4) if profile == "quick" else (1000, 16)
    apply_style()
    fig, (ax_loss, ax_cos) = plt.subplots(1, 2, figsize=(6.6, 2.4))
    rows = []
    for method, staleness, cfg in RUNS:
        res = run_flat_demo(staleness, cfg, steps=steps, seeds=seeds)
        for step in range(steps):
            for seed in range(seeds):
                rows.append({"sim": "flat_quadratic", "step": step, "seed": seed, "method": method,
                             "staleness": staleness, "objective": res.loss[step, seed].item(),
                             "cos_prev": res.cos_prev[step, seed].item(),
                             "diverged": bool(res.diverged[seed])})
        label = f"{method} (s={staleness})"
        ax_loss.plot(res.loss.median(1).values.clamp(max=1e8), color=method_color(method), label=label)
        ax_cos.plot(res.cos_prev.median(1).values, color=method_color(method), label=label)
    ax_loss.set(yscale="log", xlabel="step", ylabel="loss f(x) (median over seeds)")
    ax_cos.set(xlabel="step", ylabel="cos(g_t, g_{t-1})", ylim=(-1, 1))
    ax_loss.legend()
    write_csv(rows, out_dir / "demo_flat.csv")
    save_figure(fig, out_dir, "demo_flat")
