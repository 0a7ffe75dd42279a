"""A fake kubelet: the real ``v1.PodResourcesLister`` gRPC service on a unix socket.

It answers from plain data (a JSON file re-read on every call, or records
set in code), in the kubelet's own wire format, so the agent's client runs
unchanged against it. It can also act as the faulty kubelets the agent must
survive: one that hangs, and one too old for ``Get`` and DRA entries.

The data's shape::

    {"pods": [{"namespace": "ml", "name": "trainer-0",
               "containers": [{"name": "main",
                               "devices": [{"resourceName": "nvidia.com/gpu",
                                            "deviceIds": ["GPU-…"]}],
                               "claims": [{"claimNamespace": "ml", "claimName": "c",
                                           "driver": "gpu.nvidia.com",
                                           "pool": "node-a", "device": "gpu-0"}]}]}],
     "allocatable": {"nvidia.com/gpu.shared": ["GPU-…::0", "GPU-…::1"]}}

``allocatable`` (optional) adds devices nobody holds yet to
``GetAllocatableResources``, which otherwise lists the devices given out.

``python -m api.demo.cluster.kubelet --socket PATH --file FILE`` serves a file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import threading
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from node_resolver.generated import podresources_pb2, podresources_pb2_grpc

__all__ = ["FakeKubelet", "pod_resources"]


def pod_resources(data: Mapping[str, Any], *, dynamic: bool = True) -> list[Any]:
    """The ``PodResources`` messages of the data above; ``dynamic`` False drops DRA entries."""
    out = []
    for pod in data.get("pods") or ():
        containers = []
        for c in pod.get("containers") or ():
            claims: dict[tuple[str, str], list[Any]] = {}
            for claim in (c.get("claims") or ()) if dynamic else ():
                key = (claim.get("claimNamespace") or pod["namespace"], claim["claimName"])
                claims.setdefault(key, []).append(
                    podresources_pb2.ClaimResource(
                        driver_name=claim["driver"],
                        pool_name=claim["pool"],
                        device_name=claim["device"],
                    )
                )
            containers.append(
                podresources_pb2.ContainerResources(
                    name=c["name"],
                    devices=[
                        podresources_pb2.ContainerDevices(
                            resource_name=d["resourceName"], device_ids=list(d["deviceIds"])
                        )
                        for d in c.get("devices") or ()
                    ],
                    dynamic_resources=[
                        podresources_pb2.DynamicResource(
                            claim_namespace=ns, claim_name=name, claim_resources=resources
                        )
                        for (ns, name), resources in claims.items()
                    ],
                )
            )
        out.append(
            podresources_pb2.PodResources(
                name=pod["name"], namespace=pod["namespace"], containers=containers
            )
        )
    return out


class _Lister(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet._enter()
        return self.kubelet.list_response()

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet._enter()
        data = self.kubelet.data()
        ids: dict[str, list[str]] = {}
        for pod in data.get("pods") or ():
            for c in pod.get("containers") or ():
                for d in c.get("devices") or ():
                    ids.setdefault(d["resourceName"], []).extend(d["deviceIds"])
        for name, more in (data.get("allocatable") or {}).items():
            held = ids.setdefault(name, [])
            held.extend(i for i in more if i not in held)
        return podresources_pb2.AllocatableResourcesResponse(
            devices=[
                podresources_pb2.ContainerDevices(resource_name=name, device_ids=device_ids)
                for name, device_ids in ids.items()
            ]
        )

    def Get(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet._enter()
        if self.kubelet.old:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method Get")
        data = {"pods": self.kubelet.data().get("pods") or ()}
        for pod in pod_resources(data):
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return podresources_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
        raise AssertionError("unreachable: abort raises")


class FakeKubelet:
    """A PodResourcesLister on ``socket_path``, serving ``data`` or the file ``path``.

    ``old`` plays a kubelet before DRA and ``Get`` (1.26 and earlier): no
    dynamic resources, ``Get`` unimplemented. ``hang()`` makes every call
    block until ``release()`` or ``stop()``.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        data: Mapping[str, Any] | None = None,
        path: str | os.PathLike[str] | None = None,
        old: bool = False,
    ) -> None:
        self.socket_path = str(socket_path)
        self._data: Mapping[str, Any] = data or {"pods": []}
        self._path = Path(path) if path is not None else None
        self.old = old
        self._response: tuple[Mapping[str, Any], Any] | None = None
        self._open = threading.Event()
        self._open.set()
        self._server: grpc.Server | None = None
        self._lock = threading.Lock()
        # Calls received so far; tests read it.
        self.calls = 0

    def data(self) -> Mapping[str, Any]:
        """What the kubelet reports now: the file's content if one was given."""
        if self._path is not None:
            loaded: Mapping[str, Any] = json.loads(self._path.read_text())
            return loaded
        return self._data

    def set_data(self, data: Mapping[str, Any]) -> None:
        """Replace what the kubelet reports."""
        self._data = data

    def list_response(self) -> Any:
        """The List answer; built once per data set in code (a file is read every call)."""
        if self._path is not None:
            return podresources_pb2.ListPodResourcesResponse(
                pod_resources=pod_resources(self.data(), dynamic=not self.old)
            )
        cached = self._response
        if cached is None or cached[0] is not self._data:
            response = podresources_pb2.ListPodResourcesResponse(
                pod_resources=pod_resources(self._data, dynamic=not self.old)
            )
            cached = self._response = (self._data, response)
        return cached[1]

    def hang(self) -> None:
        """Make calls block (a kubelet that accepts but never answers)."""
        self._open.clear()

    def release(self) -> None:
        """Let blocked and later calls through."""
        self._open.set()

    def _enter(self) -> None:
        with self._lock:
            self.calls += 1
        self._open.wait()

    def start(self) -> FakeKubelet:
        """Serve on the socket (replacing a stale one)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and release blocked calls."""
        self._open.set()
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Serve a file's pods on a socket until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m api.demo.cluster.kubelet",
        description="A fake kubelet PodResources API on a unix socket.",
    )
    parser.add_argument("--socket", required=True, metavar="PATH")
    parser.add_argument("--file", required=True, metavar="PATH", help="JSON, re-read per call")
    parser.add_argument("--old", action="store_true", help="no Get, no DRA entries")
    args = parser.parse_args(argv)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with FakeKubelet(args.socket, path=args.file, old=args.old):
        print(f"serving PodResources on {args.socket}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
