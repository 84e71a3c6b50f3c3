"""Warm start: a supervised stage so that RL starts from partial held-out accuracy, the same on any machine.

Teacher-forced cross-entropy on a finite data set of ``sft_problems`` train-split problems, trained to a plateau:
after ``min_steps``, training stops once greedy held-out accuracy (checked every ``eval_every`` steps on
``eval_problems`` distinct held-out problems) has not improved by ``min_delta`` for ``patience`` checks, or at
``max_steps``. The plateau is set by the data set's size (a model that has learnt its problems generalises to part
of the rest), not by where a chaotic supervised run happens to be when it first crosses a threshold: on unlimited
data held-out accuracy jumps 0.09 → 0.50 within 25 steps and ends near 1, which leaves RL nothing to learn.

A warm start is *accepted* when its held-out accuracy lies in [``target_accuracy``, ``ceiling_accuracy``]; one
outside is retrained from the next seed of a separate stream (``seed + ATTEMPT_STRIDE · attempt``, up to
``attempts`` tries) and, if none lands inside, refused with one line naming it (``WarmStartRejected``). Never is a
warm start below target used. The ceiling exists because the plateau has a cliff of its own in the data set's size
(2-digit sums, the 0.6M model, seed 0: 512 problems plateau at 0.20, 768 at 0.83, 2048 at 0.86-0.98), so a seed
could land past it, where RL has little left to learn.

The result is saved (``model.save_model``, Hugging Face's layout) under ``runs/warmstart/<hash of its config and of
the warm-start
code>/`` (``sim.paths``) and reused by every run with the same config and code (``GAC_LAB_RUNS`` moves the
folder). One process trains a missing warm start while the others wait on its lock; a staging folder left by a
killed trainer is removed by the next one. ``python -m sim.llm.warmstart --out DIR`` makes one into a folder of
your choice (the tests' committed checkpoint was made so).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from sim import paths
from sim.fingerprint import code_fingerprint
from sim.llm.model import SIZES, build_model, load_model, sample, save_model
from sim.llm.task import EOS, AdditionTask
from sim.record import current_umask, exclusive_lock

RUNS_DIR = paths.runs_dir()
"""The warm-start cache's root (``sim.paths``: the checkout's runs/, else the user's cache folder; GAC_LAB_RUNS)."""
WARM_START_CODE = ("sim/llm/warmstart.py", "sim/llm/model.py", "sim/llm/task.py")
"""The source that computes a warm start: an edit to any of them trains a new one."""
ATTEMPT_STRIDE = 1_000_003
"""A retrained warm start's seed is ``seed + ATTEMPT_STRIDE · attempt``: a stream no other warm seed reaches."""


class WarmStartRejected(ValueError):
    """No attempt of a warm start reached its target accuracy (the message names it, on one line)."""


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
        if self.size not in SIZES:
            raise ValueError(f"warm start size must be one of {', '.join(SIZES)}, got {self.size!r}")
        AdditionTask(digits=self.digits)  # checks the width
        if not 0.0 <= self.target_accuracy <= 1.0:
            raise ValueError(f"warm start target_accuracy must be in [0, 1], got {self.target_accuracy}")
        if not self.target_accuracy <= self.ceiling_accuracy <= 1.0:
            raise ValueError(f"warm start ceiling_accuracy must be in [target_accuracy, 1] = [{self.target_accuracy}, "
                             f"1], got {self.ceiling_accuracy}")
        for name in ("sft_problems", "max_steps", "attempts", "batch_size", "eval_every", "eval_problems",
                     "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"warm start {name} must be >= 1, got {getattr(self, name)}")
        if self.min_steps < 0 or self.min_delta < 0 or not self.lr > 0:
            raise ValueError("warm start min_steps >= 0, min_delta >= 0 and lr > 0 required")

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

    def name(self) -> str:
        """A short name for messages: size, digits, seed."""
        return f"warm start {self.size} d{self.digits} seed {self.seed}"


@torch.no_grad()
def heldout_accuracy(model, task: AdditionTask, operands: torch.Tensor) -> float:
    """Greedy exact-match accuracy on ``operands`` (one batched decode)."""
    was_training = model.training
    model.eval()
    responses, _, _ = sample(model, task.prompts(operands), task.answer_len, greedy=True)
    correct, _ = task.verify(operands, responses.cpu())
    model.train(was_training)
    return float(correct.mean())


def supervised_loss(model, task: AdditionTask, operands: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens (up to and including EOS) given the prompt."""
    device = next(model.parameters()).device
    prompts, answers = task.prompts(operands).to(device), task.answers(operands).to(device)
    ids = torch.cat([prompts, answers], dim=1)
    logits = model(ids)[:, prompts.shape[1] - 1 : -1]
    # Answer tokens through the first EOS count; the PAD after it does not.
    valid = torch.cumsum((answers == EOS).long(), dim=1) - (answers == EOS).long() == 0
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), answers.reshape(-1),
                                             reduction="none").reshape(answers.shape)
    return (loss * valid).sum() / valid.sum()


def train_attempt(cfg: WarmStartConfig, seed: int, device: str = "cpu", log=print) -> tuple[torch.nn.Module, dict]:
    """One supervised run from ``seed`` to a plateau (or ``max_steps``); (model, info)."""
    task = AdditionTask(digits=cfg.digits)
    model = build_model(cfg.size, seed).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    data = task.train_set(cfg.sft_problems, seed)
    generator = torch.Generator().manual_seed(seed + 10_000)
    heldout = task.heldout_set(cfg.eval_problems)
    accuracy, best, best_step, step, stopped, history = 0.0, -1.0, 0, 0, "max_steps", []
    for step in range(1, cfg.max_steps + 1):
        batch = data[torch.randint(0, len(data), (cfg.batch_size,), generator=generator)]
        loss = supervised_loss(model, task, batch)
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


def train_warm_start(cfg: WarmStartConfig, device: str = "cpu", log=print) -> tuple[torch.nn.Module, dict]:
    """Train ``cfg``'s warm start: (model, info) of the first attempt at or above target (info: steps, held-out
    accuracy, why it stopped, the attempt and the seed it used, the thread count, every attempt's accuracy).
    ``WarmStartRejected`` (one line) when no attempt reaches the target."""
    cfg.validate()
    tried = []
    for attempt in range(cfg.attempts):
        model, info = train_attempt(cfg, cfg.seed + ATTEMPT_STRIDE * attempt, device, log)
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
    return RUNS_DIR / "warmstart" / f"{cfg.size}-d{cfg.digits}-{cfg.key()}-{code_fingerprint(WARM_START_CODE)[:8]}"


def warm_start(cfg: WarmStartConfig, device: str = "cpu", log=print) -> tuple[Path, dict]:
    """The cached warm-start checkpoint directory for ``cfg`` (trained and saved on first use).

    Trained under a lock (``.NAME.lock``; other processes wait), staged in ``.NAME.staging*`` and renamed into
    place; files 0666 and folders 0777 minus the umask, like any file the user writes.
    """
    path = warm_start_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path.parent / f".{path.name}.lock", f"warm start {path}", wait=True):
        for stale in path.parent.glob(f".{path.name}.staging*"):  # left by a killed trainer: nobody else stages
            shutil.rmtree(stale, ignore_errors=True)
        if path.exists():
            return path, read_info(path)
        model, info = train_warm_start(cfg, device, log)
        save_warm_start(model, cfg, info, path)
    return path, info


def save_warm_start(model, cfg: WarmStartConfig, info: dict, path: Path, command: str | None = None) -> Path:
    """Write ``model`` with its ``warmstart.json`` (config, info, the warm-start code's fingerprint and, if given,
    the command that made it) to ``path`` atomically: staged beside it, then renamed into place (a folder already
    there is replaced only once the new one is complete)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.staging"))
    try:
        save_model(model.to("cpu"), staging)
        meta = {"config": asdict(cfg), "info": info, "code_fingerprint": code_fingerprint(WARM_START_CODE),
                **({"command": command} if command else {})}
        (staging / "warmstart.json").write_text(json.dumps(meta, indent=1))
        for item in [staging, *staging.rglob("*")]:
            os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~current_umask())
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(staging, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def read_info(path: Path) -> dict:
    """The info of a cached warm start; one-line ValueError naming the folder if it is damaged."""
    try:
        return json.loads((path / "warmstart.json").read_text())["info"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"cached warm start {path} is damaged (warmstart.json: {type(err).__name__}); delete that "
                         "folder and rerun to train it again") from None


def load_warm_start(cfg: WarmStartConfig, device: str = "cpu", log=print) -> tuple[torch.nn.Module, dict]:
    path, info = warm_start(cfg, device, log)
    try:
        return load_model(path).to(device), info
    except ValueError as err:
        raise ValueError(f"cached warm start {path} is damaged ({str(err).split(': ', 1)[-1]}); delete that folder "
                         "and rerun to train it again") from None


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
    try:
        cli.config.validate()
        if cli.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {cli.threads}")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(cli.threads)
    out = Path(cli.out)
    if out.exists() and not (out / "warmstart.json").exists() and any(out.iterdir()):
        print(f"error: --out {out} holds files that are not a warm start; choose an empty or new folder",
              file=sys.stderr)
        return 2
    try:
        model, info = train_warm_start(cli.config)
    except WarmStartRejected as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    command = "python -m sim.llm.warmstart " + " ".join(sys.argv[1:] if argv is None else argv)
    save_warm_start(model, cli.config, info, out, command)
    print(f"{cli.config.name()}: held-out accuracy {info['heldout_accuracy']:.3f} after {info['steps']} steps "
          f"({info['stopped']}), written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
