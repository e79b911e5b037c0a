"""Config reload: SIGHUP, or with `--watch` a change of the config file, loads the config again and puts its policy
and upstream set in force for new calls: guards, in-process hosts, interceptor servers, overrides,
`interceptors.config`, the `chain` settings, and the upstreams (added ones started, changed ones replaced, removed
ones drained and closed; see `upstream_reload`). Calls in flight finish on the old policy and connections, which
are closed once they are done. A config that does not load, validate or start (an upstream that cannot start, two
that expose one name) is refused and logged; the running one stays, and what it started is stopped.

The other sections (fronts, auth, audit, metrics, scrub, ui) take effect at the next start, and a reload that
changes them says so. `Gateway.replace_policy` is the swap; this module decides when and what.

A SIGHUP that comes while the gateway starts (before `on_sighup` listens) is kept (`start_signals.hold_sighup`)
and reloads once it serves, instead of ending the process.
"""

from __future__ import annotations

import hashlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.governor import Governor
from mcp_interceptors.gateway.sources import chain_for, close_sources, populate_chain
from mcp_interceptors.gateway.start_signals import take_held_sighup
from mcp_interceptors.gateway.upstream_reload import announcements, diff, prepare
from mcp_interceptors.invoker import Chain

logger = logging.getLogger("mcp_interceptors.gateway.reload")

#: The sections a reload puts in force; every other one waits for the next start.
RELOADED = ("interceptors", "chain", "upstreams")
#: How often `--watch` looks at the config file.
WATCH_EVERY_S = 1.0


class Reloader:
    """Reloads `gateway`'s policy from `load()` (the config as the command line reads it); one reload at a time."""

    def __init__(
        self,
        gateway: Gateway,
        load: Callable[[], GatewayConfig],
        file: str,
        *,
        on_applied: Callable[[Chain], object] | None = None,
    ) -> None:
        self.gateway = gateway
        self.load = load
        self.file = file
        #: Told each chain put in force (the caller closes the last one at shutdown).
        self.on_applied = on_applied
        self._one_at_a_time = anyio.Lock()
        #: Reloads that put a new config in force, and those refused (for tests and logs).
        self.applied = 0
        self.refused = 0

    async def reload(self, why: str) -> bool:
        """Load, build and swap in the new policy; whether it is in force (False: refused, the old one stays)."""
        async with self._one_at_a_time:
            current = self.gateway.config
            try:
                config = self.load()
            except Exception as exc:  # a bad file, a field it refuses: nothing was started
                return self._refuse(why, current.redact(str(exc)))
            chain = chain_for(config)
            try:
                # The guards keep the shared state store of the start (a new `state:` applies at the next start).
                await populate_chain(chain, config, self.gateway.task_group, file=self.file, state=self.gateway.state)
            except Exception as exc:  # a guard that refuses its config, an interceptor server that cannot start
                await close_sources(chain, replaced_by=self.gateway.chain)  # what started before the failure
                return self._refuse(why, config.redact(str(exc)))
            change = diff(current, config)
            if not change.empty:
                gateway = self.gateway
                try:
                    await prepare(change, config, gateway.connections, gateway.listings)
                except Exception as exc:  # an upstream that cannot start, two that expose one name
                    await close_sources(chain, replaced_by=self.gateway.chain)
                    return self._refuse(why, config.redact(_upstream_reason(exc)))
            later = [name for name in type(config).model_fields if _differs(name, config, current)]
            merged = current.with_policy_of(config)
            if not change.empty:
                merged = merged.model_copy(update={"upstreams": config.upstreams})
            # The policy and the upstream set swap in one step, with no await: a call starts on the old or the new.
            old_chain, old_governor, retired = self.gateway.replace_policy(
                merged, chain, None if change.empty else change
            )
            self.applied += 1
            if self.on_applied is not None:
                self.on_applied(chain)
            interceptors = len(chain.entries)
            logger.info(
                "config reloaded from %s (%s): %d interceptors in force for new calls; %d calls in flight finish "
                "on the previous config",
                self.file,
                why,
                interceptors,
                old_governor.users,
            )
            if not change.empty:
                logger.info(
                    "config reload (%s): upstreams %s; %d connections drain their calls in flight, then close",
                    why,
                    change.describe(),
                    len(retired),
                )
                self.gateway.task_group.start_soon(self.gateway.notifications.announce, announcements(change, retired))
            if later:
                logger.warning(
                    "config reload (%s): %s changed in %s; they take effect at the next start",
                    why,
                    ", ".join(later),
                    self.file,
                )
            self.gateway.task_group.start_soon(_retire, old_chain, old_governor, chain)
            return True

    def _refuse(self, why: str, reason: str) -> bool:
        self.refused += 1
        logger.error("config reload (%s) refused, the running config stays: %s", why, reason)
        return False

    async def on_sighup(self) -> None:
        """Reload on each SIGHUP until cancelled (not on Windows, which has no SIGHUP)."""
        if sys.platform == "win32":
            return
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            if take_held_sighup():
                await self.reload("SIGHUP while starting")
            async for _ in signals:
                await self.reload("SIGHUP")

    async def watch(self, paths: Sequence[str], every_s: float = WATCH_EVERY_S) -> None:
        """Reload when one of `paths` changes (polled: an editor may replace the file rather than write it)."""
        seen = [_fingerprint(path) for path in paths]
        while True:
            await anyio.sleep(every_s)  # a poll interval: there is no portable file-change event to wait on
            now = [_fingerprint(path) for path in paths]
            if now == seen or None in now:  # unchanged, or replaced mid-way by a save: look again
                continue
            changed = [path for path, before, after in zip(paths, seen, now, strict=True) if before != after]
            seen = now
            await self.reload(f"{', '.join(changed)} changed")


def _differs(name: str, new: GatewayConfig, current: GatewayConfig) -> bool:
    return name not in RELOADED and name != "base_dir" and getattr(new, name) != getattr(current, name)


def _upstream_reason(exc: Exception) -> str:
    """Why the new upstream set was refused: an upstream's own message (naming it), else the error."""
    message = getattr(exc, "message", None)
    return f"the new upstream set was not put in force: {message if isinstance(message, str) else exc}"


def _fingerprint(path: str) -> bytes | None:
    """The file's content hash (None while it is missing: a save that replaces it, mid-way)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:
        return None


async def _retire(chain: Chain, governor: Governor, successor: Chain) -> None:
    """Once no call runs on the replaced policy, close its interceptor servers and hosts (not those it shares
    with its successor)."""
    await governor.drained()
    await close_sources(chain, replaced_by=successor)
