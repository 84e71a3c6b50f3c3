"""The trainer's gradient signal-to-noise ratio at a warm start, resolved prompt group by prompt group.

At one θ (the warm start), n prompt groups are drawn and the gradient X_i of each group's loss alone is taken with
the trainer's own loss (``sim.llm.train.accumulate_gradient`` on that group's samples). Their Gram matrix K = X Xᵀ
gives the unbiased U-statistics

    |E X|² ≈ (|Σ X_i|² − Σ |X_i|²) / (n(n − 1)),    tr Cov X ≈ (Σ |X_i|² − |Σ X_i|²/n) / (n − 1),

their ratio r_group = |E X|² / tr Cov X, its jackknife standard error (each group left out in turn, from K;
conservative, by up to √2, where the signal is small) and an unbiased-variance one (``snr_ratio``).
The plain |X̄|² would be biased up by tr Cov / n, which is larger than the signal itself at these batch sizes.

Normalisation: the trainer's loss is a token mean over the batch, so a batch's gradient is Σ_i T_i g_i / Σ_i T_i
(T_i the group's response tokens, g_i the gradient of its own token mean, which accumulate_gradient returns).
X_i = T_i g_i / T̄ with T̄ the measured batch's mean tokens per group makes that batch's gradient exactly the mean
of the X_i; r does not depend on T̄ (a common scale). The per-sample r is r_group / G: a batch of N = nG samples
(n i.i.d. groups) has SNR |E X|² / (tr Cov X / n) = N·r.

A tied group (all rewards equal) has advantages 0, hence X_i = 0 exactly: its gradient is not computed, it is
counted (the tied fraction f) and kept in r (what a batch that trains on every group gets), and a second estimate
r_untied is taken over the untied groups alone (what dynamic sampling gets: its N samples are all informative; it
draws N/(1 − f) to find them). ``python -m experiments.snr OUT.csv --warm-seeds 1 2 3`` writes
docs/data/llm_snr.csv; ``--reward partial`` measures per-digit partial credit, a different reward from the paper's
exact match.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import tyro

from sim.llm.args import Args

if TYPE_CHECKING:
    import pandas as pd
    import torch

BASE = dict(size="small", method="sync", prompts_per_step=32, minibatches=1, ratio_to="behaviour",
            max_grad_norm=1.0, lr=3e-4, warm_ceiling=0.5, warm_attempts=10, progress=False)
"""The LLM testbed's run (``experiments.llm_figures.BASE``: the small model, its warm starts accepted in [0.1, 0.5]
after up to 10 attempts); ``prompts_per_step`` is the groups one rollout draws (a chunk of the measured batch)."""
KEY = ("warm_seed", "digits", "group_size", "reward", "groups", "seed")
"""The columns that name one measurement (a new one replaces the row with the same key)."""


# -- the estimator -------------------------------------------------------------------------------------------------
def _ratio(n, total, diagonal):
    """r = |E X|² / tr Cov X from n, 1ᵀK1 = |Σ X_i|² and tr K = Σ |X_i|² (broadcasts over arrays)."""
    mean_sq = (total - diagonal) / (n * (n - 1))
    trace = (diagonal - total / n) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(trace > 0, mean_sq / np.where(trace > 0, trace, 1.0), np.nan)


def snr_ratio(gram: np.ndarray) -> tuple[float, float, float]:
    """(r, its jackknife standard error, its U-statistic standard error) of the rows X_i of X from their Gram matrix
    ``gram`` = X Xᵀ (n × n): r = |E X|² / tr Cov X by the unbiased U-statistics of the module's docstring.

    The jackknife takes the n estimates that leave one row out, each from ``gram`` alone. It is conservative where
    the noise's second-order term dominates (r·n small against 1, a degenerate U-statistic): there it counts that
    term twice, up to √2 in the error. The U-statistic error is the delta method's Var(U − rV) / V² (U, V the two
    statistics) with Var(U − rV) estimated without bias from the Hoeffding decomposition of its kernel
    h_ij = (1 + r) K_ij − r (K_ii + K_jj)/2: (4(n − 2)(ζ1) + 2 ζ2) / (n(n − 1)), ζ1 and ζ2 from the means of
    h_ij h_ik over distinct triples, of h_ij² over pairs and of h_ij h_kl over distinct quadruples, all sums of
    ``gram``. NaN below 4 rows or where every row is equal.
    """
    gram = np.asarray(gram, dtype=np.float64)
    n = len(gram)
    if n < 4:
        return math.nan, math.nan, math.nan
    diagonal, rows, total = np.diag(gram), gram.sum(1), gram.sum()
    estimate = float(_ratio(n, total, diagonal.sum()))
    if not math.isfinite(estimate):
        return estimate, math.nan, math.nan
    left_out = _ratio(n - 1, total - 2 * rows + diagonal, diagonal.sum() - diagonal)
    jackknife = (float(math.sqrt((n - 1) / n * ((left_out - left_out.mean()) ** 2).sum()))
                 if np.isfinite(left_out).all() else math.nan)
    trace = (diagonal.sum() - total / n) / (n - 1)
    kernel = (1 + estimate) * gram - estimate * (diagonal[:, None] + diagonal[None, :]) / 2
    np.fill_diagonal(kernel, 0.0)
    pairs_sum, squares, row_sums = kernel.sum(), (kernel**2).sum(), kernel.sum(1)
    pairs, triples = n * (n - 1), n * (n - 1) * (n - 2)
    quadruples = (pairs_sum**2 + 2 * squares - 4 * (row_sums**2).sum()) / (triples * (n - 3))
    zeta1 = ((row_sums**2).sum() - squares) / triples - quadruples
    zeta2 = squares / pairs - quadruples
    variance = (4 * (n - 2) * zeta1 + 2 * zeta2) / pairs
    return estimate, jackknife, math.sqrt(max(variance, 0.0)) / trace


def gram_matrix(chunks: list[torch.Tensor], slab: int = 8192) -> np.ndarray:
    """X Xᵀ of the rows of ``chunks`` (each (c, d), stacked in order), column slab by column slab: each slab's
    product in the rows' dtype (a sum over ``slab`` terms), the slabs summed in float64. Every element is copied
    once and no float64 copy of X is made."""
    import torch

    rows = sum(len(c) for c in chunks)
    gram = torch.zeros(rows, rows, dtype=torch.float64)
    for start in range(0, chunks[0].shape[1] if chunks else 0, slab):
        part = torch.cat([c[:, start:start + slab] for c in chunks])
        gram += (part @ part.T).double()
    return ((gram + gram.T) / 2).numpy()


# -- one measurement -----------------------------------------------------------------------------------------------
def group_gradients(args: Args, groups: int, reward: str = "exact", log=print) -> dict:
    """At ``args``' warm start, ``groups`` prompt groups drawn ``args.prompts_per_step`` at a time: the Gram matrix of
    the untied groups' X_i (module docstring), which groups are tied, and the CPU seconds (``time.process_time``)
    of generation and of the trainer's batched backward over the tied and the untied samples (what a training step
    on these samples costs; the per-group gradients are the measurement's own cost, timed apart)."""
    import torch

    from experiments.partial_credit import PartialCreditTask
    from sim.llm.train import accumulate_gradient, rollouts, setup

    run = setup(args, log)
    if reward == "partial":
        run.task = PartialCreditTask(digits=args.digits)
    size, chunks, tied, tokens, rewards = args.group_size, [], [], [], []
    cpu = dict(generate=0.0, backward_tied=0.0, backward_untied=0.0, per_group=0.0)
    done = 0
    while done < groups:
        take = min(args.prompts_per_step, groups - done)
        start = time.process_time()
        data = rollouts(run, run.model)
        cpu["generate"] += (time.process_time() - start) * take / args.prompts_per_step  # the groups used
        group_tied = (data["reward"].view(-1, size) == data["reward"].view(-1, size)[:, :1]).all(1)[:take]
        group_tokens = data["mask"].view(-1, size, data["mask"].shape[-1]).sum((1, 2)).double()[:take]
        samples = (torch.arange(take)[:, None] * size + torch.arange(size)).to(args.device)
        for name, chosen in (("backward_tied", group_tied), ("backward_untied", ~group_tied)):
            if chosen.any():
                run.optimizer.zero_grad(set_to_none=True)
                start = time.process_time()
                accumulate_gradient(run, data, samples[chosen.to(args.device)].reshape(-1))
                cpu[name] += time.process_time() - start
        start, rows = time.process_time(), []
        for i in torch.nonzero(~group_tied).flatten().tolist():
            run.optimizer.zero_grad(set_to_none=True)
            accumulate_gradient(run, data, samples[i])  # the gradient of the group's token mean, g_i
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                              for p in run.params])
            rows.append(flat * float(group_tokens[i]))  # T_i g_i: divided by T̄ once the batch is complete
        run.optimizer.zero_grad(set_to_none=True)
        if rows:
            chunks.append(torch.stack(rows).cpu())
        cpu["per_group"] += time.process_time() - start
        tied.append(group_tied.cpu())
        tokens.append(group_tokens.cpu())
        rewards.append(data["reward"][:take * size].cpu())
        done += take
        log(f"[snr] {done}/{groups} groups, {int(torch.cat(tied).sum())} tied")
    mean_tokens = float(torch.cat(tokens).mean())
    return {"gram": gram_matrix(chunks) / mean_tokens ** 2, "tied": torch.cat(tied).numpy(), "cpu": cpu,
            "warm_accuracy": run.warm_info.get("heldout_accuracy", math.nan), "mean_tokens": mean_tokens,
            "mean_reward": float(torch.cat(rewards).mean())}


def snr_row(measured: dict, group_size: int) -> dict:
    """The SNR summary of one ``group_gradients`` result: r per sample (r_group / G) with its standard errors
    (``snr_ratio``: jackknife ``_se``, U-statistic ``_se_u``), over
    every group (tied ones as X_i = 0) and over the untied ones; the tied fraction; the samples per step for batch
    SNR 1 and 4 (N = SNR / r; with dropped tied groups N counts the samples in the update, which draws N/(1 − f));
    the CPU seconds per sample of generation and backward, and the batch SNR bought per CPU second."""
    tied, untied_gram, cpu = measured["tied"], measured["gram"], measured["cpu"]
    n, n_untied = len(tied), int((~tied).sum())
    gram = np.zeros((n, n))
    gram[np.ix_(~tied, ~tied)] = untied_gram
    r_all, se_all, se_u_all = (x / group_size for x in snr_ratio(gram))
    r_untied, se_untied, se_u_untied = (x / group_size for x in snr_ratio(untied_gram))
    samples, informative = n * group_size, n_untied * group_size
    cost_all = (cpu["generate"] + cpu["backward_tied"] + cpu["backward_untied"]) / samples
    cost_untied = (cpu["generate"] + cpu["backward_untied"]) / informative if informative else math.nan
    needed = lambda snr, r: snr / r if r > 0 else math.inf  # noqa: E731
    return {"samples": samples, "tied_frac": 1 - n_untied / n,
            "r_sample": r_all, "r_sample_se": se_all, "r_sample_se_u": se_u_all,
            "r_untied_sample": r_untied, "r_untied_sample_se": se_untied, "r_untied_sample_se_u": se_u_untied,
            "samples_snr1": needed(1, r_all), "samples_snr4": needed(4, r_all),
            "samples_snr1_untied": needed(1, r_untied), "samples_snr4_untied": needed(4, r_untied),
            "cpu_s_per_sample": cost_all, "cpu_s_per_untied_sample": cost_untied,
            "snr_per_cpu_s": r_all / cost_all, "snr_per_cpu_s_untied": r_untied / cost_untied,
            "cpu_generate_s": cpu["generate"], "cpu_backward_s": cpu["backward_tied"] + cpu["backward_untied"],
            "cpu_measure_s": sum(cpu.values()), "mean_tokens_per_group": measured["mean_tokens"],
            "mean_reward": measured["mean_reward"],
            "warm_accuracy": measured["warm_accuracy"]}


# -- the command line ----------------------------------------------------------------------------------------------
@dataclass
class Cli:
    """The per-group gradient SNR at the small model's warm starts, one row per warm start × configuration."""

    out: tyro.conf.Positional[str]
    """CSV to write (docs/data/llm_snr.csv); rows already there with another key are kept"""
    warm_seeds: tuple[int, ...] = (1, 2, 3)
    """warm starts (their seeds; trained once and cached, as the testbed's)"""
    digits: tuple[int, ...] = (2,)
    """task difficulties (operand widths)"""
    group_size: tuple[int, ...] = (8,)
    """samples per prompt G"""
    groups: int = 256
    """prompt groups per measurement (n)"""
    chunk: int = 32
    """groups per rollout draw (bounds the rollouts' memory)"""
    reward: Literal["exact", "partial"] = "exact"
    """exact: the paper's exact-match reward; partial: the share of correct answer tokens (not the paper's)"""
    seed: int = 0
    """seed of the prompts and samples"""
    threads: int = 1
    """torch CPU threads"""


def check(cli: Cli) -> list[Args]:
    """One-line ValueError for bad input (before any work); the Args of each measurement."""
    if not str(cli.out).endswith(".csv"):
        raise ValueError(f"OUT must be a .csv file, got {cli.out!r}")
    if not Path(cli.out).resolve().parent.is_dir():
        raise ValueError(f"the folder of OUT {cli.out!r} does not exist")
    if cli.groups < 4:
        raise ValueError(f"--groups must be >= 4 (the U-statistic and its jackknife), got {cli.groups}")
    if cli.chunk < 1:
        raise ValueError(f"--chunk must be >= 1, got {cli.chunk}")
    if not (cli.warm_seeds and cli.digits and cli.group_size):
        raise ValueError("--warm-seeds, --digits and --group-size each need at least one value")
    configs = [Args(**BASE, warm_seed=w, digits=d, group_size=g, seed=cli.seed, threads=cli.threads) for d in
               cli.digits for g in cli.group_size for w in cli.warm_seeds]
    configs = [replace(a, prompts_per_step=min(cli.chunk, cli.groups)) for a in configs]
    for args in configs:
        args.validate()
    return configs


def merge(path: Path, rows: list[dict]) -> pd.DataFrame:
    """``rows`` added to the table at ``path`` (if any), replacing its rows with the same KEY."""
    import pandas as pd

    new = pd.DataFrame(rows)
    if path.exists():
        old = pd.read_csv(path)
        keys = set(new[list(KEY)].astype(str).agg("|".join, axis=1))
        old = old[~old[list(KEY)].astype(str).agg("|".join, axis=1).isin(keys)]
        new = pd.concat([old, new], ignore_index=True)
    return new.sort_values(list(KEY), kind="stable").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    from experiments.verdict import code_commit

    cli = tyro.cli(Cli, args=argv, description=Cli.__doc__)
    try:
        configs = check(cli)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from sim.llm.warmstart import WarmStartRejected

    command = "python -m experiments.snr " + shlex.join(sys.argv[1:] if argv is None else argv)
    commit = code_commit()
    refused = 0
    for args in configs:
        try:
            measured = group_gradients(args, cli.groups, cli.reward, log=lambda line: print(line, file=sys.stderr))
        except WarmStartRejected as err:  # the other warm starts are still measured
            print(f"error: {err}", file=sys.stderr)
            refused += 1
            continue
        row = {"warm_seed": args.warm_seed, "digits": args.digits, "group_size": args.group_size,
               "reward": cli.reward, "groups": cli.groups, "seed": cli.seed, **snr_row(measured, args.group_size),
               "code": commit, "command": command}
        table = merge(Path(cli.out), [row])
        tmp = Path(cli.out).with_suffix(".csv.tmp")
        table.to_csv(tmp, index=False)
        tmp.replace(cli.out)
        print(f"warm {args.warm_seed} d{args.digits} G{args.group_size} {cli.reward}: r/sample "
              f"{row['r_sample']:.3g} ± {row['r_sample_se']:.2g}, untied {row['r_untied_sample']:.3g} ± "
              f"{row['r_untied_sample_se']:.2g}, tied {row['tied_frac']:.2f}, N(SNR 1) {row['samples_snr1']:.0f}, "
              f"{row['cpu_measure_s']:.0f} CPU s")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
