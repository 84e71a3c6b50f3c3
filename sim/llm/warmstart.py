"""Warm start: a supervised stage on the CPU so that RL starts from partial held-out accuracy, the same on any machine.

Cross-entropy on ``sft_problems`` train-split problems until held-out accuracy plateaus (the data set's size sets
the plateau); accepted in [``target_accuracy``, ``ceiling_accuracy``], else retrained from the next seed of its own
stream, and refused in one line after ``attempts``. Cached under ``runs/warmstart/<config hash>-<code hash>/``
(Hugging Face's layout); ``python -m sim.llm.warmstart --out DIR`` writes one into a folder of your choice.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime import paths
from runtime.files import atomic_write_bytes, exclusive_lock
from runtime.fingerprint import code_fingerprint

if TYPE_CHECKING:  # the model code (torch) loads where it runs: the command line parses its config without it
    import torch

    from sim.llm.task import AdditionTask

RUNS_DIR = paths.runs_dir()
"""The warm-start cache's root (``runtime.paths``: the checkout's runs/, else the user's cache folder; GAC_LAB_RUNS)."""
WARM_START_CODE = ("sim/llm/warmstart.py", "sim/llm/model.py", "sim/llm/task.py")
"""The source that computes a warm start: an edit to any of them trains a new one."""
ATTEMPT_STRIDE = 1_000_003
"""A retrained warm start's seed is ``seed + ATTEMPT_STRIDE · attempt``: a stream no other warm seed reaches."""


class WarmStartRejected(ValueError):
    """No attempt of a warm start landed in its acceptance range (the message names it, on one line)."""


@dataclass(frozen=True)
class WarmStartConfig:
    """What defines a warm-start checkpoint (its hash names the cache folder)."""

    size: str = "small"
    """model size (sim/llm/model.py)"""
    digits: int = 2
    """operand width of the addition problems"""
    seed: int = 0
    """seed of the initialisation, of the supervised data set and of its batches"""
    sft_problems: int = 512
    """size of the finite supervised data set (distinct train-split problems): it sets the plateau"""
    target_accuracy: float = 0.1
    """acceptance: held-out accuracy at the end must be at least this"""
    ceiling_accuracy: float = 0.5
    """acceptance: and at most this (a warm start that generalised past it leaves RL little to learn)"""
    min_steps: int = 400
    """no plateau stop before this many steps"""
    patience: int = 4
    """plateau: this many checks in a row without an improvement of min_delta over the best so far"""
    min_delta: float = 0.01
    """what counts as an improvement of held-out accuracy"""
    max_steps: int = 3000
    """stop here if no plateau came first (accepted if at or above target)"""
    attempts: int = 3
    """tries (the next seed of the stream each) before a warm start below target is refused"""
    batch_size: int = 128
    """problems per supervised step (drawn with replacement from the data set)"""
    lr: float = 3e-3
    """AdamW step size"""
    eval_every: int = 50
    """held-out check every this many steps"""
    eval_problems: int = 1000
    """distinct held-out problems per check (standard error ≤ 0.016 at 1000)"""

    def validate(self) -> None:
        """One-line ValueError for a bad setting (called before any training)."""
        from sim.llm.model import SIZES
        from sim.llm.task import AdditionTask

        if self.size not in SIZES:
            raise ValueError(f"warm start size must be one of {', '.join(SIZES)}, got {self.size!r}")
        AdditionTask(digits=self.digits)  # checks the width
        if not 0.0 <= self.target_accuracy <= self.ceiling_accuracy <= 1.0:
            raise ValueError(f"warm start target_accuracy must be in [0, ceiling_accuracy] and ceiling_accuracy in "
                             f"[target_accuracy, 1], got {self.target_accuracy} and {self.ceiling_accuracy}")
        for name in ("sft_problems", "max_steps", "attempts", "batch_size", "eval_every", "eval_problems",
                     "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"warm start {name} must be >= 1, got {getattr(self, name)}")
        if self.min_steps < 0 or self.min_delta < 0 or not self.lr > 0:
            raise ValueError("warm start min_steps >= 0, min_delta >= 0 and lr > 0 required")

    def name(self) -> str:
        return f"warm start {self.size} d{self.digits} seed {self.seed}"


def heldout_accuracy(model, task: AdditionTask, operands: torch.Tensor) -> float:
    """Greedy exact-match accuracy on ``operands`` (one batched decode)."""
    from sim.llm.model import sample

    responses, _, _ = sample(model, task.prompts(operands), task.answer_len, greedy=True)
    return float(task.verify(operands, responses).mean())


def train_attempt(cfg: WarmStartConfig, seed: int, log=print) -> tuple[torch.nn.Module, dict]:
    """One supervised run from ``seed`` to a plateau (or ``max_steps``); (model, info)."""
    import torch

    from sim.llm.model import build_model, token_logprobs
    from sim.llm.task import AdditionTask, through_first_eos

    task = AdditionTask(digits=cfg.digits)
    model = build_model(cfg.size, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    data = task.distinct_pairs(cfg.sft_problems, seed, heldout=False)  # the finite supervised data set
    generator = torch.Generator().manual_seed(seed + 10_000)
    heldout = task.heldout_set(cfg.eval_problems)
    accuracy, best, best_step, step, stopped, history = 0.0, -1.0, 0, 0, "max_steps", []
    for step in range(1, cfg.max_steps + 1):
        batch = data[torch.randint(0, len(data), (cfg.batch_size,), generator=generator)]
        answers = task.answers(batch)  # cross-entropy of the answer through its EOS (not the PAD after)
        logp, _ = token_logprobs(model, task.prompts(batch), answers)
        valid = through_first_eos(answers)
        loss = -(logp * valid).sum() / valid.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % cfg.eval_every == 0:
            accuracy = heldout_accuracy(model, task, heldout)
            history.append(round(accuracy, 4))
            log(f"[warm start] seed {seed} step {step} loss {loss.item():.3f} held-out accuracy {accuracy:.3f}")
            if accuracy >= best + cfg.min_delta:
                best, best_step = accuracy, step
            if step >= cfg.min_steps and step - best_step >= cfg.patience * cfg.eval_every:
                stopped = "plateau"
                break
    if step % cfg.eval_every:  # max_steps off the check grid: measure the model that is returned
        accuracy = heldout_accuracy(model, task, heldout)
    return model, {"steps": step, "heldout_accuracy": accuracy, "stopped": stopped, "seed_used": seed,
                   "heldout_problems": len(heldout), "history": history}


def train_warm_start(cfg: WarmStartConfig, log=print) -> tuple[torch.nn.Module, dict]:
    """(model, info) of the first attempt in the acceptance range; ``WarmStartRejected`` when none lands in it."""
    import torch

    cfg.validate()
    tried = []
    for attempt in range(cfg.attempts):
        model, info = train_attempt(cfg, cfg.seed + ATTEMPT_STRIDE * attempt, log)
        tried.append(round(info["heldout_accuracy"], 4))
        if cfg.target_accuracy <= info["heldout_accuracy"] <= cfg.ceiling_accuracy:
            return model, {**info, "attempt": attempt, "attempt_accuracies": tried, "accepted": True,
                           "target_accuracy": cfg.target_accuracy, "threads": torch.get_num_threads()}
        log(f"[warm start] {cfg.name()} attempt {attempt}: held-out accuracy {info['heldout_accuracy']:.3f} outside "
            f"[{cfg.target_accuracy}, {cfg.ceiling_accuracy}]; retraining from the next seed")
    raise WarmStartRejected(f"{cfg.name()} refused: held-out accuracy {', '.join(f'{a:.3f}' for a in tried)} in "
                            f"{cfg.attempts} attempts, none in its acceptance range [{cfg.target_accuracy}, "
                            f"{cfg.ceiling_accuracy}]")


def warm_start_path(cfg: WarmStartConfig) -> Path:
    """The cache folder of ``cfg``'s warm start, named by its config and the warm-start code's fingerprint."""
    key = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:12]
    return RUNS_DIR / "warmstart" / f"{cfg.size}-d{cfg.digits}-{key}-{code_fingerprint(WARM_START_CODE)[:8]}"


def warm_start(cfg: WarmStartConfig, log=print) -> tuple[Path, dict]:
    """(folder, info) of ``cfg``'s cached warm start, trained on first use under a lock that other processes wait
    on; a folder without its warmstart.json (left by a killed trainer) is trained again."""
    path = warm_start_path(cfg)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as err:
        raise ValueError(f"the warm-start folder {path.parent} cannot be written ({err.strerror}); set GAC_LAB_RUNS "
                         "to a folder you can write") from None
    with exclusive_lock(path.parent / f".{path.name}.lock", f"warm start {path}", wait=True):
        if (path / "warmstart.json").exists():
            try:
                return path, json.loads((path / "warmstart.json").read_text())["info"]
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise damaged(path, f"warmstart.json: {type(err).__name__}") from None
        model, info = train_warm_start(cfg, log)
        save_warm_start(model, cfg, info, path)
    return path, info


def save_warm_start(model, cfg: WarmStartConfig, info: dict, path: Path, command: str | None = None) -> None:
    """``model`` and its ``warmstart.json`` (config, info, code fingerprint, the command that made it) into ``path``.
    warmstart.json is removed first and written last: a folder without it is an unfinished one."""
    from sim.llm.model import save_model

    (path / "warmstart.json").unlink(missing_ok=True)
    save_model(model, path)
    meta = {"config": asdict(cfg), "info": info, "code_fingerprint": code_fingerprint(WARM_START_CODE),
            **({"command": command} if command else {})}
    atomic_write_bytes(path / "warmstart.json", json.dumps(meta, indent=1).encode())


def damaged(path: Path, why: str) -> ValueError:
    return ValueError(f"cached warm start {path} is damaged ({why}); delete that folder and rerun to train it again")


def load_warm_start(cfg: WarmStartConfig, log=print) -> tuple[torch.nn.Module, dict]:
    from sim.llm.model import load_model

    path, info = warm_start(cfg, log)
    try:
        return load_model(path), info
    except ValueError as err:
        raise damaged(path, str(err).split(": ", 1)[-1]) from None


@dataclass
class MakeWarmStart:
    """Train one warm start into a folder: ``python -m sim.llm.warmstart --out DIR [--config.size tiny ...]``."""

    out: str
    """folder to write the checkpoint into (config.json + model.safetensors, plus warmstart.json)"""
    config: WarmStartConfig = WarmStartConfig()
    """the warm start"""
    threads: int = 1
    """torch CPU threads"""


def main(argv: list[str] | None = None) -> int:
    import tyro

    cli = tyro.cli(MakeWarmStart, args=argv, description=MakeWarmStart.__doc__)
    import torch  # after parsing: --help answers without it

    out = Path(cli.out)
    try:
        cli.config.validate()
        if cli.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {cli.threads}")
        if out.exists() and not (out / "warmstart.json").exists() and any(out.iterdir()):
            raise ValueError(f"--out {out} holds files that are not a warm start; choose an empty or new folder")
        torch.set_num_threads(cli.threads)
        model, info = train_warm_start(cli.config)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if isinstance(err, WarmStartRejected) else 2
    command = "python -m sim.llm.warmstart " + " ".join(sys.argv[1:] if argv is None else argv)
    save_warm_start(model, cli.config, info, out, command)
    print(f"{cli.config.name()}: held-out accuracy {info['heldout_accuracy']:.3f} after {info['steps']} steps "
          f"({info['stopped']}), written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
