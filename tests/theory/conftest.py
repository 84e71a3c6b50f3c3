"""The `heavy` marker: theory checks that simulate for seconds (Monte Carlo, long runs).

`make mutation` deselects them (`-m "not heavy"`) so each mutant is judged by the fast, exact checks;
`pytest tests/theory` runs them all.
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: a theory check that simulates for seconds (deselected by mutmut)")
