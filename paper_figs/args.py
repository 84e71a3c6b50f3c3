"""The figure command's arguments (``python -m paper_figs``), apart from the code that runs them, so that
``--help`` and a bad argument answer without importing torch or the simulators."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from runtime import paths
from runtime.cli import choice, folder, whole

# Figure name -> module under paper_figs/ (module name = figure name). Order = listing order for "all".
FIGURES = ["fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region", "fig5_llm_grpo",
           "fig6_ablation", "fig7_bound", "fig8_tuned", "fig9_early_warning", "fig10_verdict", "figs1_bandit_snr",
           "figs2_llm_signature", "figs3_staleness_lr"]
LLM_FIGURES = ("fig5_llm_grpo", "fig10_verdict", "figs2_llm_signature")
"""The figures with a ``gpu`` profile (the 25M model on one GPU)."""
FigureName = Literal[tuple([*FIGURES, "all"])]
DRY_RUN_DIR = "dry_run"
"""The sub-folder of --out that a --dry-run writes into."""


@dataclass(frozen=True)
class FigureArgs:
    """Regenerate the paper's figures (PNG, PDF and the CSV each figure plots)."""

    names: tyro.conf.Positional[tuple[Annotated[FigureName, choice("a figure name", (*FIGURES, "all"))], ...]]
    """figure names, or 'all' for every figure in order"""
    profile: Annotated[Literal["quick", "full", "gpu"], choice("--profile", ("quick", "full", "gpu"))] = "quick"
    """run lengths and seeds: quick (minutes), full (paper scale, hours on CPU) or gpu (LLM figures, --device cuda)"""
    device: str = "cpu"
    """torch device for the runs (cpu or cuda[:N])"""
    out: Annotated[Path, folder("--out")] = paths.figures_dir()
    """output folder"""
    force: bool = False
    """recompute every run the figures read, even when cached results exist (GAC_LAB_FORCE=1 does the same)"""
    dry_run: bool = False
    """LLM figures: every run shrunk to the tiny model, 2 steps, one seed, on the CPU, and their toy panels' simulations
    (fig1, fig3, fig9, fig10) to the tests' smoke sizes (checks a command starts and writes its CSV; a gpu profile then
    needs no CUDA device). Writes into OUT/dry_run/, never over real figures"""
    jobs: Annotated[int | None, whole("--jobs", 1, "worker processes")] = None
    """worker processes (default: runtime.graph.default_jobs, one per core; GAC_LAB_JOBS too);
    with --executor ray, tasks at once (default: the cluster's CPUs)"""
    executor: Annotated[Literal["local", "ray"], choice("--executor", ("local", "ray"))] = "local"
    """where the runs are computed: local worker processes, or a Ray cluster (pip install -e '.[cluster]'); the same
    CSVs either way"""
    address: str | None = None
    """with --executor ray: the cluster to join (host:port, or auto for the one `ray start` made here); default: a
    local cluster started for this command"""

    def __post_init__(self):
        """The checks that need only the values (the folder and the device are checked by ``python -m paper_figs``
        before any work, as they ask the machine)."""
        if not self.names:
            raise ValueError(f"give figure names or 'all': {', '.join(FIGURES)}")
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"--jobs must be a whole number of worker processes >= 1, got {self.jobs}")
        if self.address is not None and self.executor != "ray":
            raise ValueError("--address names a Ray cluster: give it with --executor ray")
        if self.profile == "gpu":
            if any(name not in LLM_FIGURES for name in self.names):  # 'all' too: it holds the toy figures
                raise ValueError(f"--profile gpu applies to the LLM figures only ({', '.join(LLM_FIGURES)})")
            if not self.dry_run and not self.device.startswith("cuda"):
                raise ValueError("--profile gpu needs --device cuda (or --dry-run for a CPU smoke test)")
