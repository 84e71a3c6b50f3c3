"""RESULTS.md's tables, made from the committed CSVs in docs/data/: ``python -m experiments.results_tables`` rewrites
every block between ``<!-- table: NAME -->`` and ``<!-- /table -->``; ``--check`` changes nothing and exits 1 naming
the tables that differ (the test suite runs it). RESULTS.md's prose is written by hand; its numbers are in the tables.

Each CSV a table reads carries provenance columns, ``code`` (the commit whose code made it) and ``command`` (what made
it); the table's source line quotes them. A command that rewrites a CSV drops them: ``python -m
experiments.results_tables stamp docs/data/X.csv --command "..."`` adds them back (``--code`` defaults to HEAD).
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
RESULTS = ROOT / "RESULTS.md"
PROVENANCE = ("code", "command")
"""The columns that say where a committed CSV came from."""
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
MINUS = "−"


class ProvenanceMissing(ValueError):
    """A CSV that feeds a table has no ``code`` or ``command`` column (or an empty cell in one)."""


# --- formatting -------------------------------------------------------------------------------------------------------


def number(x: float, digits: int = 3, sign: bool = False) -> str:
    """``x`` with ``digits`` decimals, a typographic minus, ``+`` in front when ``sign``; "–" for NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if round(x, digits) == 0:  # no "−0.000"
        x = 0.0
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", MINUS)


def interval(mean: float, low: float, high: float, digits: int = 3, sign: bool = True) -> str:
    """'+0.186 [0.100, 0.272]': the mean (signed) and its interval."""
    return f"{number(mean, digits, sign)} [{number(low, digits)}, {number(high, digits)}]"


def percent(mean: float, low: float, high: float) -> str:
    return f"{number(100 * mean, 0, True)} % [{number(100 * low, 0, True)}, {number(100 * high, 0, True)}]"


def step(lr: float) -> str:
    """A step size in the form the docs use: 1.5e-4, 3e-4."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def arm_label(arm: str) -> str:
    """The committed CSVs' arm names in words: 'gac gradient s=16' -> 'GAC gradient s = 16', 'gac_update' -> 'GAC
    update', 'kl_target+gac' -> 'KL-target + GAC'."""
    words = {"gac": "GAC", "tis": "TIS", "vcpo": "VCPO", "bapo": "BAPO", "m2po": "M2PO", "braking": "Adaptive Braking"}
    arm = arm.replace("kl_target", "KL-target")
    parts = [" ".join(words.get(w, w) for w in re.split(r"[ _]", part.strip())) for part in arm.split("+")]
    label = " + ".join(parts)
    return re.sub(r"s=(\d+)", r"s = \1", label)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# --- provenance -------------------------------------------------------------------------------------------------------


def read(name: str, data: Path = DATA):
    """A committed CSV as a DataFrame, refused when it lacks its provenance columns."""
    import pandas as pd

    frame = pd.read_csv(data / name, dtype={column: str for column in PROVENANCE})  # a commit like 74818e2 stays text
    missing = [c for c in PROVENANCE if c not in frame or frame[c].isna().any()]
    if missing:
        raise ProvenanceMissing(f"docs/data/{name} has no {' or '.join(missing)} column (or an empty cell): "
                                f"python -m experiments.results_tables stamp docs/data/{name} --command '...'")
    return frame


def source_line(frames: dict[str, object]) -> str:
    """'Data: `docs/data/X.csv` (code abc1234, `command`)', one entry per distinct (code, command) of each CSV."""
    parts = []
    for name, frame in frames.items():
        pairs = list(dict.fromkeys(zip(frame["code"], frame["command"], strict=True)))
        made = "; ".join(f"code {code}, `{command}`" for code, command in pairs)
        parts.append(f"`docs/data/{name}` ({made})")
    return "Data: " + ", ".join(parts) + "."


def stamp(path: Path, command: str, code: str) -> None:
    """Add (or overwrite) the provenance columns of the CSV at ``path``; every other cell is kept as written."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise ValueError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    keep = [i for i, column in enumerate(header) if column not in PROVENANCE]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([header[i] for i in keep] + list(PROVENANCE))
    for row in body:
        writer.writerow([row[i] for i in keep] + [code, command])
    tmp = path.with_suffix(".csv.tmp")
    tmp.write_text(out.getvalue())
    tmp.replace(path)


# --- the tables -------------------------------------------------------------------------------------------------------


def testbed_table(data: Path) -> str:
    """The LLM testbed: each arm's gain over its warm start and its paired difference to sync (95 % t-intervals over
    the 8 warm starts, ``experiments.llm_figures.paired_summary``), its mean cosine and drift."""
    from experiments.llm_figures import paired_summary

    runs = read("llm_figures_runs.csv", data)
    rows = []
    for r in paired_summary(runs).itertuples():
        paired = "0" if r.arm == "sync" else interval(r.minus_sync, r.minus_sync_low, r.minus_sync_high)
        rows.append([arm_label(r.arm), interval(r.gain, r.gain_low, r.gain_high), paired, number(r.cos_prev),
                     number(r.cos_bound), number(r.kl_behaviour)])
    header = ["arm", "gain in held-out accuracy", "final − sync (paired)", "consecutive cosine",
              "its bound SNR/(1+SNR)", "KL to π_b"]
    return markdown_table(header, rows) + "\n\n" + source_line({"llm_figures_runs.csv": runs})


def highsnr_table(data: Path) -> str:
    """The high-SNR study (``experiments.llm_highsnr``): per arm, the runs and warm starts in, how many collapsed,
    final held-out accuracy minus sync's (paired on warm start and seed; 95 % t-interval over warm starts), the
    consecutive cosine after the first fifth of the steps beside its cap at the arm's measured batch SNR, and the
    KL to π_b."""
    from experiments.llm_figures import paired_summary

    runs = read("llm_highsnr_runs.csv", data)
    runs = runs[runs.figure.str.contains("fig3")]
    summary = paired_summary(runs).set_index("arm")
    rows = []
    for arm, part in runs.groupby("arm", sort=False):
        r = summary.loc[arm]
        paired = "0" if arm == "sync" else interval(r.minus_sync, r.minus_sync_low, r.minus_sync_high)
        rows.append([arm_label(arm), f"{len(part)} / {part.warm_seed.nunique()}",
                     f"{int(part.collapsed.sum())} / {len(part)}", number(part.final_accuracy.mean()), paired,
                     number(r.cos_prev), number(r.cos_bound), number(part.snr_batch.mean(), 2),
                     number(r.kl_behaviour, 2)])
    header = ["arm", "runs / warm starts", "collapsed", "final accuracy", "final − sync (paired)",
              "consecutive cosine", "its cap SNR/(1+SNR)", "batch SNR", "KL to π_b"]
    return markdown_table(header, rows) + "\n\n" + source_line({"llm_highsnr_runs.csv": runs})


EARLY_STEPS = 20
"""fig1's early window: the steps before the first held-out check (no run can have collapsed yet)."""


def highsnr_fig1_table(data: Path) -> str:
    """fig1 at high SNR: per ratio and staleness, naive async's consecutive cosine (after the first fifth of the
    steps, as in the fig3 table), its cap at the arm's measured batch SNR, the cosine as a share of that cap and, paired
    with sync on warm start and seed (95 % t-interval over warm starts), the cosine and its share of the cap minus
    sync's; and the mean cosine over the first ``EARLY_STEPS`` steps, before any run is checked for collapse."""
    from experiments.llm_figures import over_warm_starts, paired_difference

    runs = read("llm_highsnr_runs.csv", data)
    steps = read("llm_highsnr_runs_steps.csv", data)
    runs = runs[runs.figure.str.contains("fig1")].assign(share=lambda t: t.cos_prev / t.cos_bound)
    early = steps[steps.step.between(1, EARLY_STEPS)].groupby(["arm", "warm_seed", "seed"]).cos_prev.mean()
    runs = runs.join(early.rename("cos_early"), on=["arm", "warm_seed", "seed"])
    sync = runs[runs.arm == "sync"]
    runs = runs.sort_values(["ratio_to", "staleness"], kind="stable")  # sync (behaviour, s = 0), then by staleness
    rows = []
    for arm, part in runs.groupby("arm", sort=False):
        cells = [arm_label(arm), f"{len(part)} / {part.warm_seed.nunique()}",
                 f"{int(part.collapsed.sum())} / {len(part)}"]
        for key, digits in (("cos_prev", 3), ("cos_bound", 3), ("share", 2), ("cos_early", 3)):
            cells.append(number(over_warm_starts(part[key], part.warm_seed)[0], digits))
        for key, digits in (("cos_prev", 3), ("share", 2)):
            if arm == "sync":
                cells.append("0")
                continue
            cells.append(interval(*paired_difference(part, sync, key), digits))
        rows.append(cells)
    header = ["arm", "runs / warm starts", "collapsed", "consecutive cosine", "its cap SNR/(1+SNR)",
              "cosine / cap", f"cosine, steps 1–{EARLY_STEPS}", "cosine − sync (paired)", "cosine / cap − sync's"]
    return markdown_table(header, rows) + "\n\n" + source_line({"llm_highsnr_runs.csv": runs})


def snr_table(data: Path) -> str:
    """The per-group gradient SNR at the warm starts (``experiments.snr``): r per sample, with and without the tied
    groups, the samples per step that batch SNR 1 needs, and the batch SNR of the high-SNR configuration (2,048
    untied samples), ± one jackknife standard error."""
    snr = read("llm_snr.csv", data)
    rows = [[str(r.warm_seed), str(r.group_size), r.reward, number(r.tied_frac, 2),
             f"{r.r_sample * 1e4:.2f} ± {r.r_sample_se * 1e4:.2f}", f"{r.r_untied_sample * 1e4:.2f} ± "
             f"{r.r_untied_sample_se * 1e4:.2f}", f"{r.samples_snr1:,.0f}", f"{r.samples_snr1_untied:,.0f}",
             f"{2048 * r.r_untied_sample:.2f} ± {2048 * r.r_untied_sample_se:.2f}"] for r in snr.itertuples()]
    header = ["warm seed", "G", "reward", "tied", "r per sample (×10⁻⁴)", "r per untied sample (×10⁻⁴)",
              "samples for SNR 1", "untied samples for SNR 1", "batch SNR at 2,048 untied"]
    return markdown_table(header, rows) + "\n\n" + source_line({"llm_snr.csv": snr})


def signature_gaps_table(data: Path) -> str:
    """The quick signature map: async (s = 16) minus sync, per configuration (interval over seeds)."""
    gaps = read("figs2_llm_signature_gaps.csv", data)
    rows = [[r.config, str(r.staleness), str(r.seeds),
             interval(r.gap_cos_prev_step, r.gap_cos_prev_step_low, r.gap_cos_prev_step_high),
             interval(r.gap_final_accuracy, r.gap_final_accuracy_low, r.gap_final_accuracy_high),
             f"{number(r.sync_snr_halves)} / {number(r.async_snr_halves)}"] for r in gaps.itertuples()]
    header = ["configuration", "s", "seeds", "async − sync RL-step cosine", "async − sync final accuracy",
              "SNR sync / async"]
    return markdown_table(header, rows) + "\n\n" + source_line({"figs2_llm_signature_gaps.csv": gaps})


def verdict_table(data: Path) -> str:
    """The verdict: every arm at its own tuned step on the testbed, 90 % hierarchical bootstrap intervals."""
    table, runs = read("verdict_llm_v2.csv", data), read("verdict_llm_v2_runs.csv", data)
    ess = runs[runs.role == "report"].groupby("arm").ess_ratio_mean.mean()
    rows = []
    for r in table.itertuples():
        minus_naive = "0" if r.arm == "naive" else interval(r.minus_naive, r.minus_naive_low, r.minus_naive_high)
        minus_sync = "0" if r.arm == "sync" else interval(r.minus_sync, r.minus_sync_low, r.minus_sync_high)
        rows.append([arm_label(r.arm), step(r.lr), f"{step(r.robust_low)} – {step(r.robust_high)}",
                     number(r.final_accuracy), minus_naive, minus_sync, number(r.kl_behaviour_mean),
                     number(ess.get(r.arm, math.nan), 2), number(r.cos_update, 2)])
    header = ["arm", "own step", "steps within 10 % of best", "final accuracy", "− naive", "− sync", "KL to π_b",
              "ESS/N", "cos(Δθ_t, Δθ_{t−1})"]
    return markdown_table(header, rows) + "\n\n" + source_line({"verdict_llm_v2.csv": table,
                                                                 "verdict_llm_v2_runs.csv": runs})


def toy_verdict_table(data: Path) -> str:
    """The toys' verdict: share of the async − sync gap each arm recovers at its own step, Gaussian bandit, s = 16,
    with the LLM's structure (two updates per batch, clip ratio to π_b). With one update per batch tuned naive async
    is already near sync, so a share of that small gap says little; those rows stay in the CSV."""
    toys = read("verdict_toys.csv", data)
    cells = toys[(toys.sim == "bandit_gaussian") & (toys.staleness == 16) & (toys.structure == "llm")]
    columns = list(dict.fromkeys(zip(cells.structure, cells.optimizer, strict=True)))
    names = {"adam": "Adam", "sgd_momentum": "SGD-momentum"}
    rows = []
    for arm, by_arm in cells.groupby("arm", sort=False):
        gap = {(r.structure, r.optimizer): r.gap_recovered for r in by_arm.itertuples()}
        rows.append([arm_label(arm)] + [number(gap.get(c, math.nan), 2) for c in columns])
    header = ["arm"] + [f"gap recovered, {names[o]}" for _, o in columns]
    return markdown_table(header, rows) + "\n\n" + source_line({"verdict_toys.csv": toys})


def gac_table(data: Path, name: str = "signature_gac_table.csv") -> str:
    """GAC at the quick map's strongest configuration, every arm at one shared step (90 % seed-bootstrap intervals)."""
    gac = read(name, data)
    rows = [[arm_label(r.arm), step(r.lr), interval(r.final_accuracy, r.acc_low, r.acc_high, sign=False),
             "–" if r.arm in ("sync", "naive") else percent(r.gap_recovered, r.gap_low, r.gap_high),
             number(r.cos_prev_step), number(r.kl_behaviour_mean)] for r in gac.itertuples()]
    header = ["arm", "step", "final accuracy", "gap recovered", "RL-step cosine", "KL to π_b"]
    return markdown_table(header, rows) + "\n\n" + source_line({name: gac})


def law_table(data: Path) -> str:
    """The fitted exponent p of η_max ∝ s^−p against delayed-GD theory's, per scale, criterion and method."""
    fits = read("staleness_lr_scaling_fit.csv", data)
    scales = {"quadratic": "quadratic", "bandit_gaussian": "Gaussian bandit (GRPO)",
              "bandit_gaussian_mean": "Gaussian bandit (r − mean)", "llm": "LLM testbed"}
    rows = [[scales.get(r.scale, r.scale), r.criterion, arm_label(r.method),
             "censored" if r.cells_censored else interval(r.exponent, r.exponent_low, r.exponent_high, sign=False),
             number(r.theory_exponent)] for r in fits.itertuples()]
    header = ["scale", "criterion", "method", "p (90 % interval)", "theory's p"]
    return markdown_table(header, rows) + "\n\n" + source_line({"staleness_lr_scaling_fit.csv": fits})


def law_highsnr_table(data: Path) -> str:
    """The law at the high-SNR configuration (collapse criterion): per s and method, the largest step without a
    collapse on ≥ 2 of the 3 warm starts [the smallest and largest warm start's own], and s × that step (constant
    under the follow-up's S·η law, growing like s if the step alone decides); then each method's fitted p."""
    table = read("staleness_lr_highsnr.csv", data)
    fits = read("staleness_lr_highsnr_fit.csv", data)

    def cell(r) -> str:
        censored = r.seeds_censored_low + r.seeds_censored_high
        note = f" ({censored} of {r.seeds} at the grid's edge)" if censored else ""
        return f"{step(r.max_stable_lr)} [{step(r.lr_all_seeds)}, {step(r.lr_any_seed)}]{note}"

    methods = list(dict.fromkeys(table.method))
    by = {(r.method, r.staleness): r for r in table.itertuples()}
    rows = [[str(s)] + [part for m in methods for part in (cell(by[m, s]), step(s * by[m, s].max_stable_lr))]
            for s in sorted(set(table.staleness))]
    header = ["s"] + [part for m in methods for part in (f"{arm_label(m)}: largest step [warm starts' range]",
                                                        f"{arm_label(m)}: s × step")]
    fit_rows = [[arm_label(r.method), "censored" if r.cells_censored else
                 interval(r.exponent, r.exponent_low, r.exponent_high, sign=False)] for r in fits.itertuples()]
    return "\n\n".join([markdown_table(header, rows), markdown_table(["method", "p of step ∝ s^−p (90 % interval)"],
                                                                     fit_rows),
                         source_line({"staleness_lr_highsnr.csv": table, "staleness_lr_highsnr_fit.csv": fits})])


def warm_start_table(data: Path) -> str:
    """Each accepted warm start's held-out accuracy on each machine (one thread) and its spread across machines."""
    starts = read("warm_starts.csv", data)
    one = starts[(starts.threads == 1) & starts.accepted.astype(bool)]
    machines = list(dict.fromkeys(one.machine))
    short = {m: "first machine (not recorded)" if m.startswith("not recorded") else m for m in machines}
    rows = []
    for seed, by_seed in one.groupby("warm_seed"):
        accuracy = dict(zip(by_seed.machine, by_seed.heldout_accuracy, strict=True))
        spread = by_seed.heldout_accuracy.max() - by_seed.heldout_accuracy.min() if len(by_seed) > 1 else math.nan
        rows.append([str(seed)] + [number(accuracy.get(m, math.nan)) for m in machines] + [number(spread)])
    header = ["warm seed"] + [short[m] for m in machines] + ["max − min"]
    return markdown_table(header, rows) + "\n\n" + source_line({"warm_starts.csv": starts})


TABLES: dict[str, Callable[[Path], str]] = {
    "testbed": testbed_table,
    "warm-starts": warm_start_table,
    "llm-snr": snr_table,
    "highsnr": highsnr_table,
    "highsnr-fig1": highsnr_fig1_table,
    "signature-gaps": signature_gaps_table,
    "verdict": verdict_table,
    "toy-verdict": toy_verdict_table,
    "gac-table": gac_table,
    "gac-table-fresh-seeds": lambda data: gac_table(data, "signature_gac_table_seeds3-8.csv"),
    "law": law_table,
    "law-highsnr": law_highsnr_table,
}
"""Each RESULTS.md table block by name: docs/data folder -> the table's markdown (its source line included)."""


def regenerate(text: str, data: Path = DATA) -> tuple[str, list[str]]:
    """``text`` (RESULTS.md) with every table block rendered anew from ``data``, and the names of the blocks that
    changed. A block naming no known table, or a known table without a block, is an error."""
    found = [m["name"] for m in BLOCK.finditer(text)]
    unknown = sorted(set(found) - set(TABLES))
    absent = sorted(set(TABLES) - set(found))
    if unknown or absent:
        raise ValueError(f"RESULTS.md's table blocks: unknown {unknown}, missing {absent}")
    changed = []

    def render(match: re.Match) -> str:
        body = TABLES[match["name"]](data).strip() + "\n"
        if body != match["body"]:
            changed.append(match["name"])
        return match[1] + body + match[4]

    return BLOCK.sub(render, text), changed


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("python -m experiments.results_tables stamp: no git commit here; give --code")
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.results_tables", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    stamp_parser = sub.add_parser("stamp", help="add the provenance columns (code, command) to a committed CSV")
    stamp_parser.add_argument("csv", type=Path, help="the CSV, e.g. docs/data/verdict_llm_v2.csv")
    stamp_parser.add_argument("--command", required=True, help="the command that made it")
    stamp_parser.add_argument("--code", help="the commit whose code made it (default: HEAD)")
    args = parser.parse_args(argv)
    if args.action == "stamp":
        if args.csv.suffix != ".csv" or not args.csv.is_file():
            parser.error(f"{args.csv} is not a CSV file")
        stamp(args.csv, args.command, args.code or head_commit())
        print(f"stamped {args.csv}")
        return 0
    text = RESULTS.read_text()
    try:
        new, changed = regenerate(text)
    except (ValueError, FileNotFoundError) as error:
        print(f"python -m experiments.results_tables: {error}", file=sys.stderr)
        return 2
    if args.check:
        if changed:
            print(f"RESULTS.md's tables differ from docs/data/: {', '.join(changed)} "
                  "(python -m experiments.results_tables rewrites them)", file=sys.stderr)
            return 1
        print("RESULTS.md's tables match docs/data/")
        return 0
    if changed:
        tmp = RESULTS.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(RESULTS)
    print(f"RESULTS.md: {len(changed)} of {len(TABLES)} tables rewritten" + (f" ({', '.join(changed)})" if changed
                                                                             else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
