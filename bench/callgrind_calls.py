"""The gateway's instructions per stdio `tools/call` under callgrind: a count that does not move with the load.

    python bench/callgrind_calls.py                        # handshake era, the five guards
    python bench/callgrind_calls.py --era 2026-07-28       # 2026-07-28 requests (the `_meta` envelope)
    python bench/callgrind_calls.py --guards               # no guards: the bare relay

The real CLI gateway runs under `valgrind --tool=callgrind` with instrumentation off, behind the lean
driver of `jsonrpc_load.py`, with the echo upstream of `gateway_overhead.py` (an mcp server speaking both
eras, so a 2026-07-28 call is relayed in its own era; its instructions are not counted). After the
warm-up, `callgrind_control` switches counting on for `--calls` calls and off again; the gateway's
instructions (Ir) over those calls, divided by their number, is the figure printed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from pathlib import Path

import anyio
from gateway_overhead import GUARDS, gateway_argv
from jsonrpc_load import measure, stdio_session, warm
from profile_layers import envelope_session, gateway_config


async def control(pid: int, *flags: str) -> None:
    await anyio.run_process(["callgrind_control", *flags, str(pid)], check=True)


def instructions(out: Path) -> int:
    """The Ir total of a callgrind output file (its `totals:` line; `summary:` counts from the start)."""
    if found := re.search(r"^totals: (\d+)", out.read_text(), re.MULTILINE):
        return int(found.group(1))
    raise RuntimeError(f"no totals in {out}")


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="callgrind-calls-") as tmp:
        folder = Path(tmp)
        out = folder / "callgrind.out"
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        argv = [*valgrind, *gateway_argv(gateway_config(folder, False, args.guards))]
        opener = envelope_session if args.era == "2026-07-28" else stdio_session
        with (folder / "gateway.err").open("wb") as errlog:
            async with opener(argv, errlog) as session:
                await warm(session, "echo", 1)
                await control(session.pid, "-i", "on")
                await measure(session, "echo", args.calls, 1)
                await control(session.pid, "-i", "off")
        count = instructions(out)
        if args.keep:
            shutil.copy(out, args.keep)
    print(
        f"era {args.era}, guards {' '.join(args.guards) or 'none'}: {count / args.calls / 1e6:.3f} M instructions "
        f"per call over {args.calls} calls; load {os.getloadavg()[0]:.1f}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["legacy", "2026-07-28"], default="legacy")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--guards", nargs="*", default=GUARDS, help="in-process guards (none: a bare relay)")
    parser.add_argument("--keep", help="copy the callgrind output here (for callgrind_annotate)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(run, parse_args())
