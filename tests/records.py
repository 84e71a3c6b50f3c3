"""Record lists compared as the simulators mean them (NaN, "not measured", equal to NaN), and CSVs compared without
their provenance columns."""

import csv
import io
import math
from collections.abc import Sequence

from experiments.results_tables import PROVENANCE


def same_value(a, b) -> bool:
    """Two record values equal, NaN equal to NaN (a record marks "not measured" with NaN)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def same_records(a: Sequence[dict], b: Sequence[dict]) -> bool:
    """Two lists of records with the same keys and every value ``same_value``."""
    return len(a) == len(b) and all(ra.keys() == rb.keys() and all(same_value(ra[k], rb[k]) for k in ra)
                                    for ra, rb in zip(a, b, strict=True))


def without_provenance(text: str) -> str:
    """A CSV's text without its provenance columns, every other cell as written (to compare a committed summary with
    the one its code writes today, which carries none)."""
    rows = list(csv.reader(io.StringIO(text)))
    keep = [i for i, column in enumerate(rows[0]) if column not in PROVENANCE]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep])
    return out.getvalue()
