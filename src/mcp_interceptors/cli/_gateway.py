"""`gateway` and `config-schema`: run, check or describe the gateway."""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from mcp_interceptors.cli._common import CommandError, GuardChoice, print_json, repeated_guards
from mcp_interceptors.cli._runtime import freeze_start_up_heap, loop_name, run_on_loop
from mcp_interceptors.gateway.auditing import start_audit_writer
from mcp_interceptors.gateway.auth import check_auth
from mcp_interceptors.gateway.config import (
    ConfigError,
    GatewayConfig,
    authority,
    config_from,
    config_json_schema,
    parse_config,
    read_config_document,
)
from mcp_interceptors.gateway.logs import announce, configure_logging
from mcp_interceptors.gateway.preflight import (
    BindRefusedError,
    ListenError,
    check_audit_key,
    check_audit_store,
    missing_commands,
    preflight,
)
from mcp_interceptors.gateway.routing import RoutingError
from mcp_interceptors.gateway.sources import chain_for, close_sources, populate_chain, state_for
from mcp_interceptors.gateway.start_signals import cancelled_by_signal, hold_sighup
from mcp_interceptors.gateway.telemetry import Telemetry, TelemetryError, telemetry_for
from mcp_interceptors.gateway.upstream.early import run_early
from mcp_interceptors.gateway.upstream.errors import UpstreamUnavailableError
from mcp_interceptors.gateway.web_view import has_own_listener, serve_ui_listener
from mcp_interceptors.invoker import Chain
from mcp_interceptors.protocol.errors import InterceptorsError

if TYPE_CHECKING:
    from mcp_interceptors.gateway.gateway import Gateway

_log = logging.getLogger("mcp_interceptors.gateway")


def run_config_schema(args: argparse.Namespace) -> int:
    print_json(config_json_schema())
    return 0


#: What errors name as the file of the config `gateway --guard NAME -- cmd ...` stands for.
COMMAND_LINE = "<command line>"


def shortcut_config(guards: list[GuardChoice], command: list[str]) -> GatewayConfig:
    """The config `gateway --guard NAME[=CONFIG] -- cmd ...` stands for.

    The command is passed on as given: a `${VAR}` in it is the upstream's own (an `sh -c` script's), not ours.
    """
    entries = [{"name": name, **({"config": config} if config is not None else {})} for name, config in guards]
    return parse_config(
        {
            "upstreams": {"upstream": {"command": command[0], "args": command[1:]}},
            "interceptors": {"guards": entries},
        },
        file=COMMAND_LINE,
        substitute=False,
    )


def _config(args: argparse.Namespace) -> tuple[GatewayConfig, str]:
    file = args.check or args.config
    if file and args.stdio_command:
        raise CommandError("give either --config FILE or an upstream command after --, not both", 2)
    if file:
        document = read_config_document(file)
        if args.guard and not document.client:  # --check FILE would plan without them, and say "valid"
            raise CommandError(
                "--guard goes with an upstream command after --, or a client's mcpServers file; "
                "list guards in the gateway config instead",
                2,
            )
        servers = None
        if args.servers is not None:
            if document.client:
                raise CommandError("--servers FILE goes with a gateway config as --config (this is a client's)", 2)
            servers = read_config_document(args.servers)
        guards = [{"name": name, **({"config": config} if config else {})} for name, config in args.guard]
        return config_from(document, guards=guards, upstream=args.upstream, servers=servers), file
    if args.upstream is not None or args.servers is not None:
        raise CommandError(f"{'--upstream' if args.upstream else '--servers'} goes with --config FILE", 2)
    if args.stdio_command:
        return shortcut_config(args.guard, args.stdio_command), COMMAND_LINE
    raise CommandError("nothing to front: give --config FILE, or an upstream command after --", 2)


def run_gateway(args: argparse.Namespace) -> int:
    if args.config and not args.check:  # first: a SIGHUP while it starts reloads once it serves, never kills it
        hold_sighup()
    configure_logging(args.log_level, args.log_format)
    if args.json and not args.check:
        raise CommandError("--json goes with --check (it prints the plan as JSON)", 2)
    if args.check and (args.config or args.http):  # it would check one file and ignore the rest without a word
        given = "--config" if args.config else "--http"
        raise CommandError(f"--check FILE checks that file and exits: give it without {given}", 2)
    if args.watch and not args.config:
        raise CommandError("--watch goes with --config FILE (it reloads that file when it changes)", 2)
    if repeated := repeated_guards(args.guard):
        raise CommandError(f"--guard {', '.join(repeated)} is given twice; give each guard once, with one config", 2)
    try:
        config, file = _config(args)
    except ConfigError as exc:
        raise _config_error(exc, args.guard) from None
    # Values from the environment (tokens) are shown as the `${VAR}` written, in errors and logs alike.
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Redacting(config))
    try:
        return _run_command(args, config, file)
    except CommandError as exc:
        raise CommandError(config.redact(str(exc)), exc.exit_code) from None


class _Redacting(logging.Filter):
    """Writes values taken from the environment back as their `${VAR}` in each log line."""

    def __init__(self, config: GatewayConfig) -> None:
        super().__init__()
        self.config = config

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.config.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def _run_command(args: argparse.Namespace, config: GatewayConfig, file: str) -> int:
    guards: list[GuardChoice] = args.guard
    try:
        if args.check:
            check_auth(config, file)
            return anyio.run(_check, config, file, args.json)
        http = _parse_http(args.http) if args.http else None
        # Every check that can refuse the start, before any upstream, interceptor server or listener starts.
        preflight(config, file, http, insecure_no_auth=args.insecure_no_auth)
        reloading = _Reloading(lambda: _config(args)[0], [p for p in (args.config, args.servers) if p], args.watch)
        run_on_loop(args.loop, _serve, config, file, http, args.insecure_no_auth, reloading)
        return 0
    except ConfigError as exc:
        raise _config_error(exc, guards) from None
    except (RoutingError, BindRefusedError, ListenError) as exc:
        raise CommandError(str(exc)) from None
    except UpstreamUnavailableError as exc:
        raise CommandError(exc.message) from None
    except BaseExceptionGroup as group:
        leaf = _leaf(group)
        if isinstance(leaf, BrokenPipeError):  # `gateway --check ... | head`: main() stops quietly
            raise BrokenPipeError from None
        if isinstance(leaf, ConfigError):
            raise _config_error(leaf, guards) from None
        raise CommandError(_first_message(group)) from None


def _config_error(exc: ConfigError, guards: list[GuardChoice]) -> CommandError:
    """One the command line made (a `--guard` config the guard refuses) is a usage error, as it is for `serve`,
    and names the option as it was typed."""
    if (found := _GUARD_PATH.match(exc.path)) is not None and int(found[1]) < len(guards):
        name = guards[int(found[1])][0]  # only `--guard`s are listed where a config may have none of its own
        problem = exc.problem.removeprefix(f"guard {name!r}: ")
        return CommandError(f"--guard {name}: {problem} (fix: {exc.fix})", 2)
    return CommandError(str(exc), 2 if exc.file == COMMAND_LINE else 1)


_GUARD_PATH = re.compile(r"interceptors\.guards\[(\d+)\]")


def _leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup) and group.exceptions:
        group = group.exceptions[0]
    return group


def _first_message(group: BaseException) -> str:
    group = _leaf(group)
    if isinstance(group, UpstreamUnavailableError):
        return group.message
    if isinstance(group, InterceptorsError | RoutingError | BindRefusedError | ListenError):
        return str(group)
    return f"{type(group).__name__}: {group}"


def _parse_http(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise CommandError(f"--http {value!r} must look like HOST:PORT, e.g. 127.0.0.1:8080", 2)
    if not 1 <= int(port) <= 65535:
        raise CommandError(f"--http {value!r}: the port must be between 1 and 65535", 2)
    return host.strip("[]") or "127.0.0.1", int(port)


async def _check(config: GatewayConfig, file: str, as_json: bool) -> int:
    from mcp_interceptors.gateway.check import check_report, render_check  # only `--check` renders a plan

    check_audit_key(config, file)
    check_audit_store(config, file, create=False)
    async with anyio.create_task_group() as tg:
        chain = chain_for(config)
        await populate_chain(chain, config, tg, file=file)
        if as_json:
            print(json.dumps(check_report(config, chain, file), indent=2))
        else:
            print(render_check(config, chain, file))
        for missing in missing_commands(config, interceptor_servers=False):  # discovered above already
            announce(f"warning: {missing} ({missing.path})", level=logging.WARNING)
        tg.cancel_scope.cancel()
    return 0


@dataclass(frozen=True)
class _Reloading:
    """How the running gateway reloads its config: `load` reads it as the command line did; `files` (the config
    and `--servers` files) are watched with `--watch`."""

    load: Callable[[], GatewayConfig]
    files: list[str]
    watch: bool


async def _serve(
    config: GatewayConfig, file: str, http: tuple[str, int] | None, insecure_no_auth: bool, reloading: _Reloading
) -> None:
    _log.info("gateway starting on the %s event loop", loop_name())
    chains = [chain_for(config)]  # the one in force last: a reload closes those it replaced
    try:
        telemetry = telemetry_for(config.telemetry)
    except TelemetryError as exc:
        raise CommandError(str(exc)) from None
    try:
        await _run_gateway(chains, config, file, http, insecure_no_auth, reloading, telemetry)
    finally:
        await close_sources(chains[-1])
        if telemetry is not None:  # the spans still queued go out, within the export timeout
            await anyio.to_thread.run_sync(telemetry.close)


async def _run_gateway(
    chains: list[Chain],
    config: GatewayConfig,
    file: str,
    http: tuple[str, int] | None,
    insecure_no_auth: bool,
    reloading: _Reloading,
    telemetry: Telemetry | None,
) -> None:
    chain = chains[0]
    state = state_for(config)
    async with anyio.create_task_group() as tg:
        async with cancelled_by_signal(tg) as starting:  # SIGTERM while starting: stop what started, exit 0
            # The audit store opens before any interceptor server or upstream starts: one it cannot open stops
            # the start with nothing to undo.
            writer = await start_audit_writer(config, tg) if config.audit.enabled else None
            await populate_chain(chain, config, tg, file=file, state=state)
            # Nothing left can refuse the start for a reason of ours: the stdio upstreams start now, while the
            # rest is built and (a stdio gateway) its client's first message comes; a start that fails after all
            # stops them with this task group.
            early = await tg.start(run_early, config.upstreams)
            # Imported only now, while they start: the gateway's own modules overlap with theirs (~0.15 s of CPU).
            from mcp_interceptors.gateway.fronts.serve import serve_http, serve_stdio
            from mcp_interceptors.gateway.gateway import Gateway

            gateway = Gateway(
                config, chain, audit_writer=writer, state=state, telemetry=telemetry, early_upstreams=early
            )
            _log.info("start-up heap frozen: %d objects the collector skips", freeze_start_up_heap())
            if http is None:
                gateway.await_stdio_client()
            # A stdio gateway has one client: it connects the upstreams when that client says who it is.
            await gateway.start(tg, connect=http is not None)
            if has_own_listener(config, http is not None):
                await tg.start(serve_ui_listener, config)
        if starting.cancel_called:
            tg.cancel_scope.cancel()
            return
        tg.start_soon(_reload_on_request, gateway, file, reloading, chains)
        if http is None:
            await serve_stdio(gateway)
        else:
            host, port = http
            url = f"http://{authority(host, port)}{config.http.path}"

            def ready() -> None:
                announce(f"gateway listening on {url}")
                if config.ui.enabled and config.ui.listen is None:
                    view = f"http://{authority(host, port)}{config.ui.path}/"
                    announce(f"audit web view on {view}")

            await serve_http(gateway, host, port, insecure_no_auth=insecure_no_auth, on_ready=ready)
        with anyio.CancelScope(shield=True):  # before the audit writer stops: their records go with its flush
            await gateway.forget_inputs("the gateway stopped")
            if state is not None:
                with anyio.move_on_after(5):
                    await state.aclose()
        tg.cancel_scope.cancel()


async def _reload_on_request(gateway: Gateway, file: str, reloading: _Reloading, chains: list[Chain]) -> None:
    """SIGHUP (and with `--watch`, a change of the files) reloads the config; `chains` ends with the one in force."""
    if not reloading.files:  # `--guard ... -- cmd`: nothing to read again
        return
    from mcp_interceptors.gateway.reload import Reloader  # imported as the gateway serves (see `_run_gateway`)

    reloader = Reloader(gateway, reloading.load, file, on_applied=chains.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reloader.on_sighup)
        if reloading.watch:
            tg.start_soon(reloader.watch, reloading.files)
