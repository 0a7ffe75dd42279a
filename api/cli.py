"""The ``gpugraph`` command: ``agent``, ``serve``, ``top`` and ``demo``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .settings import Settings

# The server's flags, defaults and settings load only for `serve`: `gpugraph top`
# starts without them (the settings import the schema's limits, and graphql-core).
__all__ = ["add_serve_arguments", "build_parser", "main", "settings_from_args"]

# Fail closed: a server started without --auth checks every caller with the
# cluster's own RBAC; an open server has to be asked for (--auth none).
AUTH_DEFAULT = "kubernetes"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every ``gpugraph serve`` flag to ``parser``."""
    # Loaded here, not at the top: the settings take the query limits' defaults
    # from the schema package, which `gpugraph agent` should not import.
    from node_resolver.address import listen_address

    from .flags import LOG_LEVELS, add_defaulted
    from .settings import Settings

    d = Settings()

    def defaulted(group: Any, flag: str, help_text: str, **kwargs: Any) -> None:
        add_defaulted(group, d, flag, help_text, **kwargs)

    parser.add_argument(
        "--listen",
        type=listen_address,
        default=(d.listen_host, d.listen_port),
        metavar="HOST:PORT",
        help=f"where to serve HTTP (default {d.listen})",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        metavar="PATH",
        help="kubeconfig file (default: in-cluster config, else ~/.kube/config)",
    )
    agents = parser.add_argument_group("agents")
    defaulted(
        agents,
        "--agent-discovery",
        "find each node's agent at the node's InternalIP, or as the agent pod's IP",
        choices=("node-ip", "pod-ip"),
    )
    defaulted(agents, "--agent-port", "the agents' gRPC port", type=int, metavar="N")
    defaulted(agents, "--agent-namespace", "namespace of the agent pods, for pod-ip", metavar="NS")
    defaulted(
        agents, "--agent-selector", "label selector of the agent pods, for pod-ip", metavar="LABELS"
    )
    defaulted(
        agents,
        "--agent-timeout",
        "deadline of every agent call in seconds",
        type=float,
        metavar="S",
    )
    agents.add_argument(
        "--agent-token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="send the token in this file with every agent call",
    )
    defaulted(
        agents,
        "--snapshot-ttl",
        "queries within this many seconds share one call per node",
        type=float,
        metavar="S",
    )
    agents.add_argument(
        "--snapshot-keep-warm",
        type=_keep_warm,
        default=d.snapshot_keep_warm,
        metavar="auto|S",
        help="fetch nodes read by repeated queries again ahead of their next read: auto, "
        "within --snapshot-refresh-budget; S: every node read within S seconds, whatever "
        "it costs; 0: only when a query asks (default auto)",
    )
    defaulted(
        agents,
        "--snapshot-refresh-budget",
        "share of one core that keep-warm's background fetches may use, with "
        "--snapshot-keep-warm auto",
        type=float,
        metavar="CORES",
    )
    limits = parser.add_argument_group("limits")
    defaulted(limits, "--max-depth", "deepest query nesting allowed", type=int, metavar="N")
    defaulted(limits, "--max-aliases", "most aliases per query", type=int, metavar="N")
    defaulted(limits, "--max-tokens", "most tokens per query document", type=int, metavar="N")
    defaulted(
        limits,
        "--max-result-items",
        "most result objects one query may return; checked against a worst-case "
        "estimate before execution and counted during it",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--max-variable-items",
        "most list items one operation's variables may hold, entity representations "
        "included; counted before they are coerced",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--max-body-bytes",
        "largest request body, and WebSocket message",
        type=int,
        metavar="N",
    )
    defaulted(
        limits, "--request-timeout", "time limit of one GraphQL request", type=float, metavar="S"
    )
    defaulted(
        limits,
        "--max-subscriptions",
        "concurrent subscriptions per server",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--max-subscriptions-per-caller",
        "concurrent subscriptions per authenticated identity, within --max-subscriptions",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--max-history-reads-per-caller",
        "history and usage reads one caller may have at the agents at once, over all its "
        "queries; more wait their turn",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--max-history-reads-per-caller-per-node",
        "of those, at any one node (keep it below the reads an agent serves at once)",
        type=int,
        metavar="N",
    )
    defaulted(
        limits, "--header-timeout", "time limit for a request's headers", type=float, metavar="S"
    )
    defaulted(
        limits,
        "--max-connections",
        "while this many other connections are open, a new request gets 503 (not the probes)",
        type=int,
        metavar="N",
    )
    defaulted(
        limits,
        "--body-timeout",
        "time limit for a request's body, from the end of its headers",
        type=float,
        metavar="S",
    )
    http = parser.add_argument_group("http")
    http.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        dest="cors_origins",
        help="allow browser apps on this origin (e.g. https://dash.example.com); repeatable; "
        "default none",
    )
    http.add_argument(
        "--graphiql",
        action=argparse.BooleanOptionalAction,
        default=d.graphiql,
        help="serve the GraphiQL IDE on GET /graphql (default on)",
    )
    http.add_argument(
        "--introspection",
        action=argparse.BooleanOptionalAction,
        default=d.introspection,
        help="answer __schema and __type queries (default on; GraphiQL needs them)",
    )
    auth = parser.add_argument_group("auth")
    auth.add_argument(
        "--auth",
        choices=("none", "kubernetes"),
        default=AUTH_DEFAULT,
        dest="auth_mode",
        help="kubernetes: callers send 'Authorization: Bearer <token>', checked with "
        "TokenReview, and see what SubjectAccessReview allows them; none: anyone who "
        f"reaches the port sees everything (default {AUTH_DEFAULT})",
    )
    auth.add_argument(
        "--auth-audience",
        action="append",
        default=[],
        metavar="AUDIENCE",
        dest="auth_audiences",
        help="the audience tokens must be issued for (TokenReview audiences); repeatable",
    )
    defaulted(
        auth,
        "--auth-cache-ttl",
        "trust a passed review this long, a failed one a sixth of it; subscriptions "
        "re-check their caller as reviews expire",
        type=float,
        metavar="S",
    )
    metrics = parser.add_argument_group("metrics")
    metrics.add_argument(
        "--metrics-dcgm-names",
        action=argparse.BooleanOptionalAction,
        default=d.metrics_dcgm_names,
        help="on /metrics, also export DCGM_FI_DEV_FB_USED (MiB) and DCGM_FI_DEV_GPU_UTIL (%%) "
        "with dcgm-exporter's labels, for dashboards built on them (default off: they "
        "collide where dcgm-exporter runs too)",
    )
    parser.add_argument(
        "--compiled-execution",
        action=argparse.BooleanOptionalAction,
        default=d.compiled_execution,
        help="answer the queries the compiled plan covers through it (default on; off: "
        "strawberry's executor answers every query)",
    )
    metrics.add_argument(
        "--metrics-gpu-series",
        action=argparse.BooleanOptionalAction,
        default=d.metrics_gpu_series,
        help="on /metrics, the per-pod GPU series of the whole cluster, from every agent per "
        "scrape (default on; turn off on large clusters and scrape the agents, see "
        "docs/scaling.md)",
    )
    gpus = parser.add_argument_group("gpu requests")
    gpus.add_argument(
        "--gpu-resources",
        type=_names,
        default=d.gpu_resources,
        metavar="NAME,…",
        help="resource names that count as GPU requests; a trailing * covers a family "
        f"(default: {','.join(d.gpu_resources)})",
    )
    gpus.add_argument(
        "--gpu-dra-drivers",
        type=_names,
        default=d.gpu_dra_drivers,
        metavar="DRIVER,…",
        help=f"DRA drivers whose devices are GPUs (default: {','.join(d.gpu_dra_drivers)})",
    )
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default=d.log_level)


def _names(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected at least one name")
    return names


def _keep_warm(value: str) -> float | None:
    """``--snapshot-keep-warm``: ``auto`` (None, the adaptive policy) or seconds."""
    if value.strip().lower() == "auto":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or seconds, got {value!r}") from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed ``serve`` arguments; SettingsError on values that cannot work."""
    from .settings import Settings

    # Each serve flag's dest is the Settings field it sets; only --listen sets
    # two. Repeatable flags gather a list, which Settings keeps as a tuple.
    given = vars(args)
    values: dict[str, Any] = {
        f.name: tuple(given[f.name]) if isinstance(given[f.name], list) else given[f.name]
        for f in dataclasses.fields(Settings)
        if f.name in given
    }
    values["listen_host"], values["listen_port"] = args.listen
    return Settings(**values)


def _run_serve(args: argparse.Namespace) -> int:
    from .kube.config import KubeConfigError
    from .lifecycle.event_loop import run
    from .serve import serve
    from .settings import SettingsError

    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        args.parser.error(str(exc))
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown; a second ^C lands here.
    with contextlib.suppress(KeyboardInterrupt):
        try:
            run(serve(settings))
        except SettingsError as exc:  # e.g. an unreadable token file, found at start
            args.parser.error(str(exc))
        except KubeConfigError as exc:
            print(f"gpugraph serve: error: {exc}", file=sys.stderr)
            return 1
    return 0


def _load_optional(module: str, names: Sequence[str]) -> tuple[Callable[..., Any], ...] | str:
    """The named functions of ``module``, or why they cannot be loaded."""
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return f"{module} is not installed"
        raise
    missing = [name for name in names if not hasattr(loaded, name)]
    if missing:
        return f"{module} lacks {', '.join(missing)}"
    return tuple(getattr(loaded, name) for name in names)


def _add_delegated(
    subparsers: Any, name: str, help_text: str, module: str, add: str, run: str, *, load: bool
) -> None:
    sub = subparsers.add_parser(name, help=help_text, description=help_text)
    if not load:
        return
    loaded = _load_optional(module, (add, run))
    if isinstance(loaded, str):
        reason = loaded

        def unavailable(args: argparse.Namespace) -> int:
            print(f"gpugraph {name}: unavailable: {reason}", file=sys.stderr)
            return 2

        sub.set_defaults(handler=unavailable)
        return
    add_arguments, run_command = loaded
    sub.set_defaults(parser=sub)
    add_arguments(sub)
    sub.set_defaults(handler=run_command)


class _VersionAction(argparse.Action):
    """``--version``: the installed package's version, read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the installed gpugraph's version and exit")
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, default=argparse.SUPPRESS, **kwargs
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from node_resolver.version import version

        print(f"gpugraph {version()}")  # on stdout, as argparse's own "version" action
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``gpugraph`` argument parser; with ``command``, only that subcommand is complete.

    The agent, top and demo subcommands live in other modules, loaded only
    when used, and serve's flags (whose defaults come from the schema package)
    are added only for serve, so the agent on every GPU node does not import
    the GraphQL server.
    """
    parser = argparse.ArgumentParser(
        prog="gpugraph",
        description="Which pod, and which process inside it, is using this GPU.",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_delegated(
        subparsers,
        "agent",
        "run the node agent (NVML sampler and gRPC service)",
        "node_resolver.cli",
        "add_agent_arguments",
        "run_agent",
        load=command in (None, "agent"),
    )
    serve = subparsers.add_parser(
        "serve",
        help="run the GraphQL server",
        description="Run the GraphQL server: Kubernetes cache, agent fan-out, HTTP.",
    )
    if command in (None, "serve"):
        add_serve_arguments(serve)
    serve.set_defaults(handler=_run_serve, parser=serve)
    _add_delegated(
        subparsers,
        "top",
        "show the cluster's GPUs, pods, nodes and namespaces, like kubectl top and nvidia-smi",
        "api.top",
        "add_top_arguments",
        "run_top",
        load=command in (None, "top"),
    )
    _add_delegated(
        subparsers,
        "demo",
        "run a self-contained demo cluster with fake GPUs",
        "api.demo.command",
        "add_demo_arguments",
        "run_demo",
        load=command in (None, "demo"),
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpugraph`` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in arguments if not a.startswith("-")), "")
    parser = build_parser(command)
    args, unknown = parser.parse_known_args(arguments)
    if unknown:
        # The subcommand's own usage, not the top-level one, says what it takes.
        sub: argparse.ArgumentParser = getattr(args, "parser", parser)
        sub.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
