"""An upstream slow to start the first time (a server fetched by `npx` under load): each start appends a line
to `$SLOW_STARTS`; the first then waits `$SLOW_FIRST_S` seconds before serving, later ones serve at once."""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

starts = Path(os.environ["SLOW_STARTS"])
first = not starts.exists()
with starts.open("a") as log:
    log.write(f"{os.getpid()}\n")
if first:
    time.sleep(float(os.environ.get("SLOW_FIRST_S", "13")))
sys.argv = [sys.argv[0]]
runpy.run_path(str(Path(__file__).with_name("e2e_upstream.py")), run_name="__main__")
