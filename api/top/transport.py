"""GraphQL over HTTP (httpx) and graphql-transport-ws (websockets), behind one Protocol."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import httpx

from .connection import Endpoint
from .errors import TopError

TIMEOUT = 30.0
SUBPROTOCOL = "graphql-transport-ws"


class Transport(Protocol):
    """Sends GraphQL operations; tests inject their own."""

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        """The response body of one query."""
        ...

    def subscribe(self, query: str, variables: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Each result of a subscription, as a response body."""
        ...


def status_error(status: int, url: str, detail: str = "") -> TopError:
    """The one-line error for an HTTP status the CLI cannot use."""
    detail = detail.strip().splitlines()[0][:200] if detail.strip() else ""
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return TopError(f"401 unauthorized by {url}: pass --token or set GPUGRAPH_TOKEN{suffix}")
    if status == 403:
        return TopError(f"403 forbidden by {url}: the token may not read gpugraph{suffix}")
    if status == 503:
        return TopError(f"server not ready ({url} answered 503){suffix}")
    return TopError(f"{url} answered HTTP {status}{suffix}")


class HttpTransport:
    """The real transport: POST /graphql, and a WebSocket for subscriptions."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        """POST the query; TopError for anything but a GraphQL answer."""
        url = self.endpoint.url
        try:
            with httpx.Client(
                verify=self.endpoint.verify, cert=self.endpoint.client_cert, timeout=TIMEOUT
            ) as client:
                response = client.post(
                    url,
                    json={"query": query, "variables": dict(variables)},
                    headers=self.endpoint.headers,
                )
        except httpx.HTTPError as exc:
            raise TopError(f"cannot reach the gpugraph server at {url}: {exc}") from None
        if response.status_code != 200:
            raise status_error(response.status_code, url, response.text)
        try:
            body: dict[str, Any] = response.json()
        except ValueError:
            raise TopError(f"{url} did not answer with JSON: is it a gpugraph server?") from None
        return body

    def _ssl(self) -> ssl.SSLContext | None:
        if not self.endpoint.url.startswith("https://"):
            return None
        verify = self.endpoint.verify
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.endpoint.client_cert:
            context.load_cert_chain(*self.endpoint.client_cert)
        return context

    async def subscribe(
        self, query: str, variables: Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        """Follow a subscription over graphql-transport-ws until the server completes it."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.typing import Subprotocol

        url = "ws" + self.endpoint.url.removeprefix("http")
        try:
            async with connect(
                url,
                subprotocols=[Subprotocol(SUBPROTOCOL)],
                additional_headers=self.endpoint.headers,
                ssl=self._ssl(),
                open_timeout=TIMEOUT,
            ) as socket:
                await socket.send(json.dumps({"type": "connection_init", "payload": {}}))
                ack = json.loads(await socket.recv())
                if ack.get("type") != "connection_ack":
                    raise TopError(f"{url} refused the subscription: {ack}")
                await socket.send(
                    json.dumps(
                        {
                            "id": "1",
                            "type": "subscribe",
                            "payload": {"query": query, "variables": dict(variables)},
                        }
                    )
                )
                async for raw in socket:
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "ping":
                        await socket.send(json.dumps({"type": "pong"}))
                    elif kind == "next":
                        yield message["payload"]
                    elif kind == "error":
                        errors = message.get("payload") or [{}]
                        yield {"data": None, "errors": errors}
                        return
                    elif kind == "complete":
                        return
        except InvalidStatus as exc:
            raise status_error(exc.response.status_code, url) from None
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise TopError(f"cannot reach the gpugraph server at {url}: {exc}") from None
