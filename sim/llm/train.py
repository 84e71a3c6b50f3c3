"""GRPO on a small Qwen3 model with stale rollouts: `python -m sim.llm --method gac --staleness 8`.

One RL step t: the behaviour policy θ_{t−s_t} (from a ring of snapshots) samples G responses for
each of P prompts; rewards are exact-match correctness; advantages are group-normalised; the batch
is split into ``minibatches`` updates (one pass), each: token-level clipped loss → backward → GAC
(method ``gac``) → clip_grad_norm → AdamW step. Several updates per batch keep the clip active in the
synchronous baseline too (its later minibatches are off-policy by the earlier updates).

The trainer reads like CleanRL: ``setup(args)`` builds the run's state, ``rl_step(state)`` does one RL step and
returns its record (columns of sim/schema.py), ``train(args)`` yields the records one by one (stop it early by
breaking out), ``summary(state)`` gives the final held-out accuracy. The step is ``batched.py``'s, which trains K runs
of one shape in lockstep: one run is its K = 1 case. Beside the loop: the configuration in args.py, the state types in
state.py, the controls in controls.py, the probes in probes.py, checkpoints in checkpoint.py, the command line in
__main__.py (``python -m sim.llm``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch

from sim.llm.args import Args
from sim.llm.batched import heldout_accuracy, rl_step_batch, setup_batch
from sim.llm.checkpoint import (
    checked_resume,
    checkpoint_payload,
    out_dir_lock,
    prepare_out_dir,
    restore,
    save_checkpoint,
    trainer_fingerprint,
)
from sim.llm.state import BatchState, NonFiniteError
from sim.llm.warmstart import WarmStartConfig, warm_start
from sim.record import RecordStream
from sim.schema import columns

__all__ = ["Args", "BatchState", "NonFiniteError", "setup", "rl_step", "train", "summary", "run_records",
           "prepare_warm_start", "warm_start_config"]

def warm_start_config(args: Args) -> WarmStartConfig | None:
    """The warm start a run of ``args`` begins from (None when ``--model`` names a checkpoint)."""
    return args.warm_start()


def prepare_warm_start(args: Args, log=print) -> None:
    """Train and cache the warm start of ``args`` unless it is cached, as its run's ``setup`` would (same
    thread count and device), so that parallel runs only load it."""
    config = warm_start_config(args)
    if config is not None:
        torch.set_num_threads(args.threads)
        warm_start(config, args.device, log)


def setup(args: Args, log=print) -> BatchState:
    """Validate ``args``, build the run's state, and restore it from the checkpoint with ``--resume``."""
    args.validate()
    checkpoint = checked_resume(args) if args.resume else None  # refuse before the models are built
    state = setup_batch([args], log)
    if checkpoint is not None:
        restore(state, checkpoint)
        log(f"[train] resumed from {Path(args.out_dir) / 'checkpoint.pt'} at step {state.step}")
    return state


def rl_step(state: BatchState, log=print) -> dict:
    """One RL step: sample, reward, advantage, (SNR probe), minibatch updates, log. Returns its record (a
    ``diverged`` one when a non-finite loss or gradient stopped the run under ``on_nonfinite=mark``)."""
    return rl_step_batch(state, log)[0]


def train(args: Args, state: BatchState | None = None, log=print) -> Iterator[dict]:
    """Yield the record of each RL step from ``state.step`` (a fresh ``setup(args)`` if not given) to args.steps.

    A non-finite step raises NonFiniteError (``on_nonfinite=raise``) or yields a ``diverged`` record and
    stops (``mark``). With ``checkpoint_every`` the out_dir is locked and checkpoints are written (a fresh run
    into a folder with another run's outputs is refused unless ``overwrite``).
    """
    state = setup(args, log) if state is None else state
    with out_dir_lock(args.out_dir) if args.checkpoint_every else contextlib.nullcontext():
        if args.checkpoint_every and state.step == 0:
            prepare_out_dir(args)  # a fresh run: refuse (or, with --overwrite, clear) another run's outputs
        from tqdm.auto import tqdm
        bar = tqdm(range(state.step, args.steps), disable=not args.progress, initial=state.step, total=args.steps,
                   desc=f"{args.run_method} s={args.staleness}", leave=False)
        for _ in bar:
            record = rl_step(state, log)
            if record["diverged"]:
                yield record
                break
            bar.set_postfix(reward=f"{record['objective']:.2f}", cos=f"{record['cos_prev']:.2f}")
            if args.checkpoint_every and state.step % args.checkpoint_every == 0 and state.step < args.steps:
                save_checkpoint(Path(args.out_dir) / "checkpoint.pt", checkpoint_payload(state))
            yield record
        bar.close()


def summary(state: BatchState) -> dict:
    """The run's summary: its args, label, warm start, final held-out accuracy, first diverged step, and the
    fingerprint of the code that ran it (gac/, sim/)."""
    run = state.runs[0]
    return {"args": asdict(run.args), "method": run.args.run_method, "warm_start": run.warm_info,
            "final_accuracy": heldout_accuracy(state)[0], "diverged_at": run.diverged_at,
            "code_fingerprint": trainer_fingerprint()}


def run_records(args: Args, log=print, records_path: Path | str | None = None) -> dict:
    """Train to the end; ``{"records": every record (a resumed run's earlier ones too), "summary": ...}``.

    ``records_path``: each record is also appended to this CSV as it is made (a resumed run's earlier ones first),
    flushed, so a run killed at any step leaves the records of the steps it made.
    """
    state = setup(args, log)
    stream = RecordStream(records_path, columns("llm"), list(state.runs[0].records)) if records_path else None
    with stream or contextlib.nullcontext():
        for record in train(args, state, log):
            if stream is not None:
                stream.append(record)
    return {"records": state.runs[0].records, "summary": summary(state)}

