"""Warm start: a short supervised stage so that RL starts from partial held-out accuracy.

Teacher-forced cross-entropy on train-split problems until greedy held-out accuracy reaches
``target_accuracy`` (checked every ``eval_every`` steps) or ``max_steps`` pass. The result is saved
with ``save_pretrained`` under ``runs/warmstart/<hash of its config and of the warm-start code>/`` and reused by
every run with the same config and code (``GAC_LAB_RUNS`` moves the folder). One process trains a missing warm
start while the others wait on its lock; a staging folder left by a killed trainer is removed by the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from sim.fingerprint import code_fingerprint
from sim.llm.model import build_model, load_model, sample
from sim.llm.task import EOS, AdditionTask
from sim.record import current_umask, exclusive_lock

RUNS_DIR = Path(os.environ.get("GAC_LAB_RUNS", Path(__file__).resolve().parents[2] / "runs"))
WARM_START_CODE = ("sim/llm/warmstart.py", "sim/llm/model.py", "sim/llm/task.py")
"""The source that computes a warm start: an edit to any of them trains a new one."""


@dataclass(frozen=True)
class WarmStartConfig:
    """What defines a warm-start checkpoint (its hash names the cache folder)."""

    size: str = "cpu"
    digits: int = 2
    seed: int = 0
    target_accuracy: float = 0.3
    max_steps: int = 2000
    batch_size: int = 128
    lr: float = 3e-3
    eval_every: int = 25
    eval_problems: int = 256

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


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
    logits = model(input_ids=ids).logits[:, prompts.shape[1] - 1 : -1]
    # Answer tokens through the first EOS count; the PAD after it does not.
    valid = torch.cumsum((answers == EOS).long(), dim=1) - (answers == EOS).long() == 0
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), answers.reshape(-1),
                                             reduction="none").reshape(answers.shape)
    return (loss * valid).sum() / valid.sum()


def train_warm_start(cfg: WarmStartConfig, device: str = "cpu", log=print) -> tuple[torch.nn.Module, dict]:
    """Run the supervised stage; returns (model, info with steps taken and held-out accuracy)."""
    task = AdditionTask(digits=cfg.digits)
    model = build_model(cfg.size, cfg.seed).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(cfg.seed + 10_000)
    heldout = task.heldout_set(cfg.eval_problems)
    accuracy, step = 0.0, 0
    for step in range(1, cfg.max_steps + 1):
        loss = supervised_loss(model, task, task.sample_operands(cfg.batch_size, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % cfg.eval_every == 0:
            accuracy = heldout_accuracy(model, task, heldout)
            log(f"[warm start] step {step} loss {loss.item():.3f} held-out accuracy {accuracy:.3f}")
            if accuracy >= cfg.target_accuracy:
                break
    return model, {"steps": step, "heldout_accuracy": accuracy}


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
        staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.staging"))
        try:
            model.to("cpu").save_pretrained(staging)
            (staging / "warmstart.json").write_text(json.dumps({"config": asdict(cfg), "info": info}, indent=1))
            for item in [staging, *staging.rglob("*")]:
                os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~current_umask())
            os.replace(staging, path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return path, info


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
