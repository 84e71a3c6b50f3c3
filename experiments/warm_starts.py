"""The LLM figures' warm starts, and how reproducible they are: ``docs/data/warm_starts.csv``.

``python -m experiments.warm_starts OUT.csv --seeds 0 1 ... --compare-seeds 0 1 2 3 4`` trains (or finds in the
warm-start cache, where the figures' runs read them) the warm start of each seed with one thread, and the
``--compare-seeds`` again with two threads (not cached: their only use is this table), so that the same seed is
seen under other float bits. One row per (seed, threads): steps, held-out accuracy, whether it was accepted.
A refused warm start (no attempt reached its target) is a row with ``accepted`` False, never an error here.
``--append`` keeps the rows of other machines (``machine``: CPU model and torch version), so that one table compares
where the same seeds land on different CPUs; ``cpu_s`` of a warm start found in the cache is its load time.
"""

from __future__ import annotations

import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import tyro

from runtime.cli import folder, parse
from runtime.files import check_output_dir

if TYPE_CHECKING:
    import pandas as pd

    from sim.llm.warmstart import WarmStartConfig

# torch, pandas and the trainer are imported where they run (--help answers without them)
COLUMNS = ("warm_seed", "size", "digits", "sft_problems", "threads", "steps", "heldout_accuracy",
           "heldout_problems", "target_accuracy", "accepted", "attempt", "seed_used", "stopped",
           "attempt_accuracies", "cpu_s", "machine")


def machine() -> str:
    """The CPU model and torch version a warm start was trained with (float kernels differ between them)."""
    import torch

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown cpu") \
        if Path("/proc/cpuinfo").exists() else (platform.processor() or "unknown cpu")
    return f"{model}, torch {torch.__version__}"


def figure_warm_start(seed: int) -> WarmStartConfig:
    """The warm start of the LLM figures' runs with warm seed ``seed`` (the trainer's defaults)."""
    from experiments.llm_figures import BASE
    from sim.llm.train import Args

    return Args(**{k: v for k, v in BASE.items() if k.startswith("warm_") or k in ("size", "digits")},
                warm_seed=seed).warm_start()


def warm_start_row(config: WarmStartConfig, threads: int) -> dict:
    """Train ``config`` on ``threads`` threads (one thread: through the cache the runs read) and describe it."""
    import torch

    from sim.llm.warmstart import WarmStartRejected, train_warm_start, warm_start

    torch.set_num_threads(threads)
    start = time.process_time()
    base = {"warm_seed": config.seed, "size": config.size, "digits": config.digits,
            "sft_problems": config.sft_problems, "threads": threads, "target_accuracy": config.target_accuracy,
            "machine": machine()}
    try:
        if threads == 1:
            _, info = warm_start(config, log=lambda *a: None)
        else:
            _, info = train_warm_start(config, log=lambda *a: None)
    except WarmStartRejected as err:
        return {**base, "accepted": False, "stopped": str(err), "cpu_s": time.process_time() - start}
    return {**base, "steps": info["steps"], "heldout_accuracy": info["heldout_accuracy"],
            "heldout_problems": info["heldout_problems"], "accepted": info["accepted"], "attempt": info["attempt"],
            "seed_used": info["seed_used"], "stopped": info["stopped"],
            "attempt_accuracies": " ".join(f"{a:.4f}" for a in info["attempt_accuracies"]),
            "cpu_s": time.process_time() - start}


@dataclass
class Cli:
    """Train the LLM figures' warm starts and write their table (one row per seed and thread count)."""

    out: tyro.conf.Positional[Annotated[Path, folder("OUT", "give the CSV path, e.g. docs/data/warm_starts.csv")]]
    """CSV to write (e.g. docs/data/warm_starts.csv)"""
    seeds: list[int] = field(default_factory=lambda: list(range(10)))
    """warm seeds, trained with one thread"""
    compare_seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """warm seeds trained again with two threads"""
    jobs: int = 2
    """one-thread warm starts trained at once"""
    append: bool = False
    """keep OUT's rows of other machines (and of seeds/threads not trained now): the table then compares machines"""


def main(cli: Cli) -> pd.DataFrame:
    import pandas as pd

    check_output_dir(str(Path(cli.out).parent), "out")
    if cli.jobs < 1 or not cli.seeds or any(s < 0 for s in [*cli.seeds, *cli.compare_seeds]):
        raise SystemExit("error: --jobs >= 1 and non-negative --seeds (at least one) required")
    configs = [figure_warm_start(s) for s in cli.seeds]
    with ProcessPoolExecutor(cli.jobs) as pool:
        rows = list(pool.map(warm_start_row, configs, [1] * len(configs)))
        for row in rows:
            print(f"[warm starts] seed {row['warm_seed']} 1 thread: accuracy "
                  f"{row.get('heldout_accuracy', float('nan')):.3f} accepted {row['accepted']}", flush=True)
    with ProcessPoolExecutor(1) as pool:  # two threads each: one at a time on two cores
        for row in pool.map(warm_start_row, [figure_warm_start(s) for s in cli.compare_seeds],
                            [2] * len(cli.compare_seeds)):
            print(f"[warm starts] seed {row['warm_seed']} 2 threads: accuracy "
                  f"{row.get('heldout_accuracy', float('nan')):.3f} accepted {row['accepted']}", flush=True)
            rows.append(row)
    table = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    if cli.append and Path(cli.out).exists():
        table = merged(pd.read_csv(cli.out), table)
    tmp = Path(cli.out).with_suffix(".csv.tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(cli.out)
    print(summary(table))
    return table


def merged(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``old``'s rows that ``new`` does not redo (same seed, threads and machine), then ``new``'s."""
    import pandas as pd

    old = old.reindex(columns=list(COLUMNS))
    key = ["warm_seed", "threads", "machine"]
    redone = old[key].astype(str).apply(tuple, axis=1).isin(set(new[key].astype(str).apply(tuple, axis=1)))
    return pd.concat([old[~redone], new], ignore_index=True)


def summary(table: pd.DataFrame) -> str:
    """Per machine: accepted count, accuracy range, the largest 1- vs 2-thread difference per compared seed; across
    machines: each seed's one-thread accuracies and their spread."""
    lines = []
    table = table.assign(machine=table.machine.fillna("not recorded"))
    for machine, rows in table.groupby("machine", sort=False):
        one = rows[rows.threads == 1].set_index("warm_seed")
        two = rows[rows.threads == 2].set_index("warm_seed")
        accepted = one[one.accepted.astype(bool)]
        diff = (one.heldout_accuracy - two.heldout_accuracy).dropna().abs()
        lines.append(f"{machine}: accepted {len(accepted)}/{len(one)} (1 thread), accuracy "
                     f"{accepted.heldout_accuracy.min():.3f}..{accepted.heldout_accuracy.max():.3f}"
                     + ("; |1 - 2 threads| per seed: " + ", ".join(f"{s}: {d:.3f}" for s, d in diff.items())
                        if len(diff) else ""))
    one = table[(table.threads == 1) & table.accepted.astype(bool)]
    spread = one.groupby("warm_seed").heldout_accuracy.agg(["count", "min", "max"])
    spread = spread[spread["count"] > 1]
    if len(spread):
        lines.append("across machines (1 thread), max - min per seed: " + ", ".join(
            f"{s}: {r['max'] - r['min']:.3f} ({int(r['count'])})" for s, r in spread.iterrows()))
    return "\n".join(lines)


if __name__ == "__main__":
    main(parse(Cli, None, prog="python -m experiments.warm_starts"))
