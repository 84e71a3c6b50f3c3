"""A test module that starts gloo workers (it imports ``spawn_gloo``) starts their fork server before its first test,
so that the server's imports overlap the module's other tests instead of the first two-rank test."""

import pytest

from tests.gac.helpers import start_fork_server


@pytest.fixture(autouse=True, scope="module")
def _gloo_fork_server(request):
    if hasattr(request.module, "spawn_gloo"):
        start_fork_server()
