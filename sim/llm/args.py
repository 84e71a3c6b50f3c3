"""The trainer's run settings (``Args``), one field per command-line option of ``python -m sim.llm``.

Kept apart from the trainer's torch code, so that the command line parses them (and answers ``--help``) without torch:
``validate`` imports the model, task and warm-start code it checks against.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import gac
from runtime.cli import check_device, flag
from runtime.files import check_output_dir
from sim import stabilizers

if TYPE_CHECKING:
    from sim.llm.warmstart import WarmStartConfig

MAX_EVAL_PROBLEMS = 1_000_000
MAX_SAMPLES_PER_STEP = 1 << 20
"""Most samples one RL step may hold (prompts × group size): beyond it the rollout tensors alone outgrow memory."""


@dataclass
class Args:
    method: str = "naive"
    """sim/stabilizers.py's methods, one per axis joined by + (e.g. gac+tis), naive (none) or sync (naive at s=0)"""
    staleness: int = 0
    """staleness s: rollouts of step t come from the policy of step t − s (max s when kind is random)"""
    staleness_kind: str = "fixed"
    """fixed: s at every step; random: s_t uniform in 0..s"""
    steps: int = 200
    """number of RL steps (rollout batches)"""
    seed: int = 0
    """seed of prompts, sampling and minibatch order (the warm start has its own seed)"""
    lr: float = 1e-3
    """AdamW step size of the RL stage"""
    size: str = "cpu"
    """model size in sim/llm/model.py: tiny, small, cpu, gpu"""
    model: str | None = None
    """local checkpoint directory (save_pretrained format) to start from instead of the warm start"""
    digits: int = 2
    """task difficulty: operand width of the addition problems"""
    prompts_per_step: int = 16
    """P: distinct prompts per RL step"""
    group_size: int = 8
    """G: samples per prompt (GRPO group)"""
    minibatches: int = 2
    """optimizer updates per RL step (the P prompt groups are split into this many, one pass)"""
    micro_batch: int = 0
    """samples per forward/backward (an update's gradient accumulated over them, the same update); 0: all at once"""
    drop_tied_groups: bool = False
    """dynamic sampling (DAPO): drop groups whose rewards are all equal (no gradient), draw again until P are left"""
    sample_attempts: int = 8
    """with drop_tied_groups: most draws of P prompts per step (short of P untied groups, tied ones fill the rest)"""
    clip_eps: float = 0.2
    """ε of the clipped ratio"""
    ratio_to: str = "behaviour"
    """clip-ratio denominator (naive/gac/lr_scale): behaviour = π_b; proximal = π_θ at the step's start (as if fresh)"""
    temperature: float = 1.0
    """sampling temperature of the rollouts"""
    max_grad_norm: float = 1.0
    """clip_grad_norm_ after GAC"""
    gac: gac.GACConfig = field(default_factory=stabilizers.gac_config)
    """method gac: its parameters (--gac.threshold, --gac.mode, ...)"""
    gac_space: str = "gradient"
    """where gac.wrap places GAC: gradient (before AdamW), update (AdamW's proposed Δθ) or momentum (its 1st moment)"""
    tis: stabilizers.TISConfig = field(default_factory=stabilizers.TISConfig)
    """method tis: its parameters"""
    m2po: stabilizers.M2POConfig = field(default_factory=stabilizers.M2POConfig)
    """method m2po: its parameters"""
    bapo: stabilizers.BAPOConfig = field(default_factory=stabilizers.BAPOConfig)
    """method bapo: its parameters"""
    braking: stabilizers.BrakingConfig = field(default_factory=stabilizers.BrakingConfig)
    """method braking (Adaptive Braking): its parameter"""
    kl_target: stabilizers.KLTargetConfig = field(default_factory=stabilizers.KLTargetConfig)
    """method kl_target (step control by the KL to π_b): its parameters"""
    vcpo: stabilizers.VCPOConfig = field(default_factory=stabilizers.VCPOConfig)
    """method vcpo (step size by the ESS of the update's importance weights, off-policy baseline): its parameters"""
    eval_every: int = 20
    """held-out accuracy every this many steps"""
    eval_problems: int = 1000
    """distinct held-out problems per evaluation (a fixed set, the warm start's own: the first n of it)"""
    snr_every: int = 10
    """SNR probe (cos_halves) every this many steps: one extra backward at the step's start"""
    warm_target: float = 0.1
    """warm start: its acceptance target (held-out accuracy at its plateau; below it is retrained or refused)"""
    warm_ceiling: float = 1.0
    """warm start: the top of its acceptance range (above it is retrained or refused)"""
    warm_seed: int = 0
    """seed of the warm start's initialisation and data"""
    warm_sft_problems: int = 512
    """warm start: size of its finite supervised data set (sets its plateau)"""
    warm_max_steps: int = 3000
    """warm start: most supervised steps (a plateau usually stops it first)"""
    warm_attempts: int = 3
    """warm start: tries (the next seed of its stream each) before it is refused"""
    checkpoint_every: int = 0
    """save a checkpoint every this many steps (0: never)"""
    out_dir: str = "runs/llm"
    """folder of the run's records.csv, summary.json and checkpoint.pt"""
    resume: bool = False
    """continue from out_dir/checkpoint.pt (same numbers as an uninterrupted run)"""
    overwrite: bool = False
    """replace the run already in out_dir (its records, summary and checkpoint) instead of refusing"""
    allow_code_change: bool = False
    """with --resume: continue although the source (gac/, sim/) changed since the checkpoint was written"""
    device: str = "cpu"
    """torch device: cpu, cuda or cuda:N"""
    bf16: bool = False
    """CUDA only: forward and backward under bfloat16 autocast (weights, AdamW and GAC stay float32)"""
    threads: int = 1
    """torch CPU threads; part of the run's identity (long sums' last bits depend on the count)"""
    progress: bool = True
    """show a progress bar"""
    on_nonfinite: str = "raise"
    """non-finite loss/gradient: raise (error naming the step) or mark (record nonfinite=True, stop the run)"""
    stop_at_collapse: bool = False
    """end the run at its first collapse (``sim.schema.collapse_step``), for a study that only asks whether it
    collapses: the rest of the run cannot undo it"""

    def validate(self) -> None:
        """Raise ValueError (one line) for any bad setting, before work starts."""
        from sim.llm.model import SIZES, load_model
        from sim.llm.task import AdditionTask
        from sim.staleness import KINDS, Staleness

        if self.method != "sync":
            stabilizers.parse_method(self.method, stabilizers.STALE_DATA)
        if self.method == "sync" and self.staleness != 0:
            raise ValueError(f"method sync means staleness 0, got --staleness {self.staleness}; use --method naive")
        for name, choices in (("staleness_kind", KINDS), ("size", SIZES), ("gac_space", stabilizers.GAC_SPACES),
                              ("ratio_to", ("behaviour", "proximal")), ("on_nonfinite", ("raise", "mark"))):
            if getattr(self, name) not in choices:
                raise ValueError(f"{flag(name)} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        Staleness(self.staleness, self.staleness_kind)
        for name in ("steps", "prompts_per_step", "eval_every", "eval_problems", "digits", "snr_every", "threads",
                     "warm_attempts", "sample_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        AdditionTask(digits=self.digits)
        if self.group_size < 2:
            raise ValueError(f"--group-size must be >= 2 (group-normalised advantages), got {self.group_size}")
        if self.prompts_per_step * self.group_size > MAX_SAMPLES_PER_STEP:
            raise ValueError(f"--prompts-per-step × --group-size = {self.prompts_per_step * self.group_size} samples "
                             f"per step; at most {MAX_SAMPLES_PER_STEP} (use fewer, or --micro-batch for memory)")
        if self.threads > (os.cpu_count() or 1):
            raise ValueError(f"--threads {self.threads} but this machine has {os.cpu_count()} CPUs")
        if self.minibatches < 1 or self.prompts_per_step % self.minibatches:
            raise ValueError(f"--minibatches {self.minibatches} must divide --prompts-per-step {self.prompts_per_step}")
        update = self.prompts_per_step // self.minibatches * self.group_size
        if self.micro_batch < 0 or self.micro_batch > update or (self.micro_batch and update % self.micro_batch):
            raise ValueError(f"--micro-batch {self.micro_batch} must divide an update's {update} samples "
                             "(prompts-per-step / minibatches × group-size), or be 0 for the whole update")
        if self.micro_batch and self.micro_batch < update and self.axes.objective in ("m2po", "bapo"):
            raise ValueError(f"--method {self.method}: its mask or clip bounds are computed over the whole update's "
                             "ratios, so it cannot accumulate micro-batches; use --micro-batch 0")
        for name in ("lr", "clip_eps", "temperature"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{flag(name)} must be a finite number > 0, got {getattr(self, name)}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"--max-grad-norm must be > 0 (inf: no clipping), got {self.max_grad_norm}")
        if self.checkpoint_every < 0:
            raise ValueError(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
        if self.eval_problems > MAX_EVAL_PROBLEMS:  # a smaller split is used whole: the summary says how many
            raise ValueError(f"--eval-problems {self.eval_problems}: at most {MAX_EVAL_PROBLEMS} (no held-out split "
                             "holds more)")
        if self.gac.space != "gradient":  # the method configs checked their own values when they were built
            raise ValueError("the trainer places GAC with --gac-space, not --gac.space")
        check_device(self.device)
        if self.bf16 and not self.device.startswith("cuda"):
            raise ValueError("--bf16 needs --device cuda (bfloat16 autocast is for the GPU; the CPU runs float32)")
        if self.model is not None:
            load_model(self.model)  # one line naming --model unless it is a loadable checkpoint of this task
        else:
            self.warm_start().validate()
        if self.checkpoint_every:
            check_output_dir(self.out_dir, "--out-dir")
        if self.resume and not (Path(self.out_dir) / "checkpoint.pt").exists():
            raise ValueError(f"--resume but {self.out_dir}/checkpoint.pt does not exist")

    def warm_start(self) -> WarmStartConfig | None:
        """The warm start a run of these args begins from (None when ``--model`` names a checkpoint)."""
        from sim.llm.warmstart import WarmStartConfig

        return None if self.model is not None else WarmStartConfig(
            size=self.size, digits=self.digits, seed=self.warm_seed, sft_problems=self.warm_sft_problems,
            target_accuracy=self.warm_target, ceiling_accuracy=self.warm_ceiling, max_steps=self.warm_max_steps,
            attempts=self.warm_attempts)

    @property
    def axes(self) -> stabilizers.Combination:
        """The run's objective, direction control and step control."""
        return (stabilizers.Combination() if self.method == "sync"
                else stabilizers.parse_method(self.method, stabilizers.STALE_DATA))

    @property
    def run_method(self) -> str:
        """The records' ``method`` (and ``label``): the canonical method name, sync for naive at s = 0."""
        return stabilizers.record_method(self.axes, self.staleness)
