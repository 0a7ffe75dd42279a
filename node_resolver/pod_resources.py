"""The kubelet's PodResources API: one bounded List call, and a poller beside the GPU scan.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket. The poller
calls ``List`` in its own thread, every interval, with a short deadline, and
keeps the last good answer with the time it came; the sampler only ever reads
that, so a hung or missing kubelet never delays a GPU scan. Failures are
logged once per kind (and once more on recovery), not per call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import grpc

from .generated import podresources_pb2, podresources_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# A local unix-socket call that takes longer than this is a kubelet in trouble.
CALL_TIMEOUT_SECONDS = 1.0
# A good answer older than this (the kubelet failing since) no longer counts.
MAX_ANSWER_AGE_SECONDS = 60.0
# The kubelet's own limit on a PodResources message is 16 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class PodResourcesError(Exception):
    """The kubelet did not answer List; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class KubeletDevices:
    """One device-plugin resource of a container: its name and device IDs."""

    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KubeletClaimDevice:
    """One DRA device of a container's claim."""

    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class KubeletContainer:
    """One container as the kubelet's List reports it."""

    namespace: str
    pod: str
    container: str
    devices: tuple[KubeletDevices, ...] = ()
    claim_devices: tuple[KubeletClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletAnswer:
    """The last good List answer, and when it came (the poller's clock)."""

    containers: tuple[KubeletContainer, ...]
    received_at: float
    # Replicas the kubelet can hand out per time-shared device (``replica_counts``).
    replicas: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KubeletState:
    """What the poller holds: the last good answer (if still young enough) or why there is none."""

    answer: KubeletAnswer | None
    reason: str | None


def containers_from_proto(
    response: podresources_pb2.ListPodResourcesResponse,
) -> tuple[KubeletContainer, ...]:
    """The plain records of a List response (an old kubelet simply has no dynamic_resources)."""
    out: list[KubeletContainer] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            out.append(
                KubeletContainer(
                    namespace=pod.namespace,
                    pod=pod.name,
                    container=container.name,
                    devices=tuple(
                        KubeletDevices(d.resource_name, tuple(d.device_ids))
                        for d in container.devices
                    ),
                    claim_devices=tuple(
                        KubeletClaimDevice(
                            claim_namespace=dynamic.claim_namespace or pod.namespace,
                            claim_name=dynamic.claim_name,
                            driver=claim.driver_name,
                            pool=claim.pool_name,
                            device=claim.device_name,
                        )
                        for dynamic in container.dynamic_resources
                        for claim in dynamic.claim_resources
                        if claim.device_name
                    ),
                )
            )
    return tuple(out)


def replica_counts(device_ids: Iterable[str]) -> dict[str, int]:
    """How many ``ID::N`` replicas each base ID has among the kubelet's allocatable devices."""
    counts: dict[str, int] = {}
    for device_id in device_ids:
        base, marker, _ = device_id.partition("::")
        if marker:
            counts[base] = counts.get(base, 0) + 1
    return counts


class PodResourcesClient:
    """A gRPC client of the kubelet's PodResourcesLister on a unix socket."""

    def __init__(self, socket_path: str, *, timeout: float = CALL_TIMEOUT_SECONDS) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            f"unix://{socket_path}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)

    def list(self) -> tuple[KubeletContainer, ...]:
        """Every container the kubelet runs, with its devices; PodResourcesError if it cannot."""
        try:
            response = self._stub.List(
                podresources_pb2.ListPodResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            raise PodResourcesError(self._describe(exc)) from None
        return containers_from_proto(response)

    def replicas(self) -> dict[str, int]:
        """Replicas per time-shared device from ``GetAllocatableResources``; PodResourcesError
        if the kubelet does not answer it."""
        try:
            response = self._stub.GetAllocatableResources(
                podresources_pb2.AllocatableResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            raise PodResourcesError(self._describe(exc)) from None
        return replica_counts(i for d in response.devices for i in d.device_ids)

    def _describe(self, exc: grpc.RpcError) -> str:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        detail = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
        where = f"kubelet PodResources socket {self.socket_path}"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"{where} did not answer within {self.timeout:g}s"
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return f"{where} does not serve v1 List (kubelet too old?)"
        name = code.name if code is not None else "error"
        return f"{where}: {name}: {' '.join(detail.split())[:200]}"

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


class PodResourcesPoller:
    """Calls ``list`` every ``interval`` seconds in a daemon thread; ``state()`` never blocks."""

    def __init__(
        self,
        list_containers: Callable[[], tuple[KubeletContainer, ...]],
        *,
        interval: float = 1.0,
        max_age: float = MAX_ANSWER_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        list_replicas: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self._list = list_containers
        # Asked beside each List; a kubelet that cannot answer leaves replicas unknown.
        self._replicas = list_replicas
        self.interval = interval
        self.max_age = max_age
        self._clock = clock
        self._answer: KubeletAnswer | None = None
        self._reason: str | None = "the kubelet has not answered yet"
        self._logged: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Calls made so far; tests and benchmarks read it.
        self.calls = 0

    def poll(self) -> None:
        """Call the kubelet once and record the answer or the failure."""
        self.calls += 1
        try:
            containers = self._list()
        except PodResourcesError as exc:
            self._failed(str(exc))
            return
        except Exception as exc:
            # Anything else (a malformed message) costs this call, not the agent.
            self._failed(f"kubelet PodResources answer unusable: {type(exc).__name__}: {exc}")
            return
        previous = self._answer
        if previous is not None and containers == previous.containers:
            # The same object while nothing changed: the scans map it to GPUs once.
            containers = previous.containers
        replicas = self._read_replicas()
        if previous is not None and replicas == previous.replicas:
            replicas = previous.replicas
        self._answer = KubeletAnswer(containers, self._clock(), replicas)
        self._reason = None
        if self._logged is not None:
            log.info("kubelet PodResources answers again")
            self._logged = None

    def _read_replicas(self) -> Mapping[str, int]:
        if self._replicas is None:
            return {}
        try:
            return self._replicas()
        except Exception:
            # Without it a replica counts as a whole GPU until the kubelet answers it.
            return self._answer.replicas if self._answer is not None else {}

    def _failed(self, reason: str) -> None:
        self._reason = reason
        kind = reason.split(":", 1)[0]
        if self._logged != kind:
            log.warning("no allocation data: %s", reason)
            self._logged = kind

    def state(self) -> KubeletState:
        """The last good answer while it is younger than ``max_age``, else why there is none."""
        answer, reason = self._answer, self._reason
        if answer is not None and self._clock() - answer.received_at > self.max_age:
            age = self._clock() - answer.received_at
            return KubeletState(None, f"kubelet last answered {age:.0f}s ago: {reason}")
        return KubeletState(answer, None if answer is not None else reason)

    def age_of(self, answer: KubeletAnswer) -> float:
        """Seconds since ``answer`` came."""
        return max(0.0, self._clock() - answer.received_at)

    def start(self) -> None:
        """Call the kubelet once now (bounded by the call's deadline), then poll in a thread.

        The first call is made before returning so that the first scan, which
        the sampler starts next, already carries the kubelet's answer: with a
        long scan interval it would otherwise wait a whole interval for it.
        """
        if self._thread is not None:
            raise RuntimeError("poller already started")
        self.poll()
        self._thread = threading.Thread(target=self._run, name="pod-resources", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop polling; a call in flight ends within its own deadline."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()
