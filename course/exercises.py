"""The notebooks' exercise checks: the learner fills in a function (its stub raises ``NotImplementedError``), and the
check cell calls ``check(their_function, solutions.same_name, cases)``, which compares the two on each case and says
what differs. A stub not yet filled in is reported, not raised, so a notebook executes top to bottom either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

SOLUTIONS_PAGE = "the course site's Solutions page (course/solutions.md; the code: course/solutions.py)"


def close(yours, expected, rtol: float, atol: float) -> bool:
    """Whether two results agree: numbers within ``atol + rtol·|expected|`` (NaN equal to NaN), sequences and
    tensors element by element, tables (pandas) value by value, anything else by ``==``."""
    if hasattr(expected, "to_numpy"):  # a pandas table or series
        if getattr(yours, "shape", None) != expected.shape:
            return False
        yours, expected = np.asarray(yours.to_numpy(), dtype=float), np.asarray(expected.to_numpy(), dtype=float)
    elif hasattr(expected, "detach"):  # a torch tensor
        yours, expected = np.asarray(yours.detach()), np.asarray(expected.detach())
    if isinstance(expected, (tuple, list, np.ndarray)):
        yours, expected = np.asarray(yours, dtype=float), np.asarray(expected, dtype=float)
        return yours.shape == expected.shape and bool(np.allclose(yours, expected, rtol=rtol, atol=atol,
                                                                  equal_nan=True))
    if isinstance(expected, (int, float)) and isinstance(yours, (int, float)) and not isinstance(expected, bool):
        if math.isnan(expected) or math.isnan(yours):
            return math.isnan(expected) and math.isnan(yours)
        return abs(yours - expected) <= atol + rtol * abs(expected)
    return yours == expected


def check(yours: Callable, expected: Callable, cases: Sequence[tuple], rtol: float = 1e-6,
          atol: float = 1e-9) -> bool | None:
    """Call ``yours`` and ``expected`` on every case (a tuple of arguments) and print one line per case. Returns
    True when every case agrees, False when one does not, None when ``yours`` is still a stub."""
    name = getattr(yours, "__name__", "your function")
    agree = True
    for args in cases:
        try:
            mine = yours(*args)
        except NotImplementedError:
            print(f"Not done yet: fill in `{name}` in the cell above, run it, then run this cell again. "
                  f"Stuck? See {SOLUTIONS_PAGE}.")
            return None
        reference = expected(*args)
        ok = close(mine, reference, rtol, atol)
        agree &= ok
        shown = ", ".join(repr(a) if not hasattr(a, "shape") else f"<{type(a).__name__}>" for a in args)
        print(f"{'✓' if ok else '✗'} {name}({shown}): yours {brief(mine)}, expected {brief(reference)}")
    print("All cases agree." if agree else f"Some cases differ: compare with {SOLUTIONS_PAGE}.")
    return agree


def brief(value) -> str:
    """A result in one short line."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(brief(v) for v in value) + ")"
    text = repr(value) if not hasattr(value, "to_string") else value.round(4).to_string()
    return " ".join(text.split())[:120]
