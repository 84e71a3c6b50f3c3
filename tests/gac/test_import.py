"""``import gac`` and its config load without torch; the rest of the library loads on its first use, under the names
an eager import gave (``gac.control`` the function, also once ``import gac.tracker`` has loaded the submodule)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = """
import sys

import gac
from gac.config import GACConfig

GACConfig(threshold=gac.EMAThreshold(), mode="cap")
assert "torch" not in sys.modules, "the config imported torch"
import gac.tracker  # loads the submodule gac.control

assert gac.control is sys.modules["gac.control"].control, gac.control
from gac import placement, wrap

assert wrap is gac.optim.wrap and gac.fused.SUM_CHUNK > 0 and placement.control_step
assert [name for name in gac.__all__ if getattr(gac, name) is None] == []
assert set(gac.__all__) <= set(dir(gac))
public = {name for name in dir(gac) if not name.startswith("_")}
modules = {name for name in public if type(getattr(gac, name)).__name__ == "module"}
assert modules <= {"config", "placement", *gac._SUBMODULES}, modules  # its own submodules only, not sys or types
"""


def test_the_config_loads_without_torch_and_the_library_on_first_use():
    result = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
