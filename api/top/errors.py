"""The one error ``gpugraph top`` reports (one line, no traceback, exit code 1).

Also how an HTTP status or a closed WebSocket becomes that line.
"""

from __future__ import annotations

import html
import json
import re

# graphql-transport-ws's refusal of connection_init, and "try again later".
CLOSE_FORBIDDEN = 4403
CLOSE_TRY_AGAIN = 1013
TOKEN_HINT = "pass --token or set GPUGRAPH_TOKEN"
MIB = 1 << 20
KUBECONFIG_HINT = "check the kubeconfig's user"


class TopError(Exception):
    """Something the user must fix or wait for; the message is the whole report."""


def _detail(text: str) -> str:
    """The reason in an error body: a Kubernetes Status's or gpugraph's message, else its text."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or body.get("reason")
        if isinstance(message, str):
            return message
    if text.lstrip().startswith("<"):
        # A proxy's or another server's HTML page: its words, not its markup.
        text = html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", text)))
        return " ".join(text.split())[:200]
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


_HIDDEN = re.compile(r"<(script|style|head)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def status_error(status: int, url: str, body: str = "", *, hint: str = TOKEN_HINT) -> TopError:
    """The one-line error for an HTTP status the CLI cannot use; ``hint`` follows a 401."""
    detail = _detail(body)
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return TopError(f"401 unauthorized by {url}{suffix}; {hint}")
    if status == 403:
        return TopError(f"403 forbidden by {url}{suffix}")
    if status == 503:
        return TopError(f"server not ready: {url} answered 503{suffix}")
    return TopError(f"{url} answered HTTP {status}{suffix}")


def close_error(code: int | None, reason: str, url: str, *, hint: str = TOKEN_HINT) -> TopError:
    """The one-line error for a WebSocket the server closed before answering; ``hint`` follows
    a refusal for want of a token."""
    said = f" ({code} {reason})" if reason else f" ({code})" if code else ""
    if code == CLOSE_FORBIDDEN:
        # graphql-transport-ws's refusal of connection_init: no token, or one that failed.
        return TopError(
            f"401 unauthorized by {url}: the server refused the connection without a valid "
            f"token{said}; {hint}"
        )
    if code == CLOSE_TRY_AGAIN:
        return TopError(f"server not ready: {url} closed the connection{said}; try again")
    return TopError(f"{url} closed the connection{said}")


def deadline_error(url: str, seconds: float, what: str = "no answer") -> TopError:
    """The one-line error for an exchange with ``url`` that outlived its deadline."""
    return TopError(
        f"{what} from {url} within {seconds:g} s: the server is stalled or too slow "
        "(--request-timeout sets the limit)"
    )


def too_large_error(url: str, limit: int) -> TopError:
    """The one-line error for an answer of ``url`` over ``limit`` bytes."""
    return TopError(
        f"the answer of {url} is larger than {limit / MIB:.4g} MiB: stopped reading it; "
        "narrow with --node or -n, or raise --max-answer"
    )
