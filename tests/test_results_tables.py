"""RESULTS.md's tables are the committed CSVs rendered by ``experiments.results_tables``: regenerated here, they must
equal what RESULTS.md holds; a changed number in a CSV changes its table; a CSV without provenance is refused."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from experiments import results_tables as rt
from tests.records import without_provenance

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rendered():
    """RESULTS.md as it is, and as regenerated from docs/data/ (one render of every table)."""
    text = (ROOT / "RESULTS.md").read_text()
    return text, rt.regenerate(text)


def test_results_tables_match_the_committed_csvs(rendered):
    text, (new, changed) = rendered
    assert not changed, f"RESULTS.md's tables differ from docs/data/ ({changed}): python -m experiments.results_tables"
    assert new == text


def test_every_table_is_in_results_and_quotes_its_csv_and_command(rendered):
    text, _ = rendered
    blocks = {m["name"]: m["body"] for m in rt.BLOCK.finditer(text)}
    assert set(blocks) == set(rt.TABLES)
    for name, body in blocks.items():
        assert body.count("\n|") >= 2 and "Data: `docs/data/" in body and "code " in body, name


def test_a_changed_number_in_a_csv_changes_its_table(rendered, tmp_path):
    text, _ = rendered
    data = tmp_path / "data"
    shutil.copytree(ROOT / "docs" / "data", data)
    frame = pd.read_csv(data / "llm_snr.csv", dtype=str)
    frame.loc[0, "group_size"] = "7"  # G = 8, written as 7
    frame.to_csv(data / "llm_snr.csv", index=False)
    new, changed = rt.regenerate(text, data)
    assert changed == ["llm-snr"] and "| 1 | 7 | exact |" in new


def test_a_csv_without_provenance_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "llm_snr.csv").write_text(without_provenance((ROOT / "docs/data/llm_snr.csv").read_text()))
    with pytest.raises(rt.ProvenanceMissing, match="stamp docs/data/llm_snr.csv"):
        rt.snr_table(data)


def test_stamp_adds_provenance_and_keeps_every_other_cell(tmp_path):
    original = 'a,b,note\n1,0.30000000000000004,"x, y"\n2,,\n'
    path = tmp_path / "t.csv"
    path.write_text(original)
    rt.stamp(path, "python -m x --out t.csv", "74818e2")
    assert path.read_text().splitlines()[0] == "a,b,note,code,command"
    assert without_provenance(path.read_text()) == original
    rt.stamp(path, "python -m y", "abc1234")  # stamping again replaces, never duplicates
    frame = rt.read("t.csv", tmp_path)
    assert list(frame.columns) == ["a", "b", "note", "code", "command"]
    assert set(frame.code) == {"abc1234"}  # read as text: 74818e2 would otherwise parse as a float


def test_numbers_read_as_the_docs_write_them():
    assert rt.interval(0.1861, 0.0999, 0.2724) == "+0.186 [0.100, 0.272]"
    assert rt.interval(-0.0971, -0.1372, -0.0561) == "−0.097 [−0.137, −0.056]"
    assert rt.number(-0.0004) == "0.000" and rt.number(float("nan")) == "–"
    assert rt.step(0.00015) == "1.5e-4" and rt.step(0.0003) == "3e-4"
    assert rt.arm_label("gac gradient s=16") == "GAC gradient s = 16"
    assert rt.arm_label("kl_target+gac") == "KL-target + GAC"


def test_check_exits_1_when_a_table_differs(monkeypatch, tmp_path, capsys):
    stale = tmp_path / "RESULTS.md"
    text = (ROOT / "RESULTS.md").read_text()
    stale.write_text(text.replace("| 1 | 8 | exact | 0.65 |", "| 1 | 8 | exact | 0.66 |"))
    monkeypatch.setattr(rt, "RESULTS", stale)
    assert rt.main(["--check"]) == 1
    assert "llm-snr" in capsys.readouterr().err
    assert stale.read_text() != text  # --check changed nothing


def test_highsnr_fig1_pairs_each_arm_with_sync_on_its_warm_start():
    """The fig1 table's "cosine − sync (paired)": recomputed here from the runs CSV with scipy's t quantile."""
    from scipy import stats

    runs = pd.read_csv(ROOT / "docs" / "data" / "llm_highsnr_runs.csv")
    fig1 = runs[runs.figure.str.contains("fig1")].set_index(["warm_seed", "seed"])
    arm = "naive s=16, uncorrected"
    paired = (fig1[fig1.arm == arm].cos_prev - fig1[fig1.arm == "sync"].cos_prev).dropna()
    per_warm = paired.groupby(level="warm_seed").mean().to_numpy()
    half = stats.t.ppf(0.975, len(per_warm) - 1) * per_warm.std(ddof=1) / len(per_warm) ** 0.5
    mean = per_warm.mean()
    expected = f"{mean:+.3f} [{mean - half:.3f}, {mean + half:.3f}]".replace("-", "−")
    table = rt.highsnr_fig1_table(ROOT / "docs" / "data")
    row = next(line for line in table.splitlines() if line.startswith(f"| {rt.arm_label(arm)} |"))
    assert row.strip(" |").split(" | ")[7] == expected
