"""A stub Kubernetes API server: the real wire format over loopback HTTP, for pods and nodes.

One module per concept: ``transport`` (HTTP requests and chunked responses),
``routes`` (which collection a path names), ``store`` (objects,
resourceVersions, the event history), ``lists`` (paginated lists),
``watch`` (event streams), ``selectors`` (label and field selectors),
``status`` (error Status objects), ``discovery`` (``/api``, ``/apis``, what
kubectl asks first), ``tables`` (``meta.k8s.io/v1`` Tables, kubectl's human
output), ``namespaces`` (derived from the pods), ``services`` (Services and
the service proxy, with ``service_proxy`` forwarding HTTP and WebSockets),
``kubeconfig`` (how clients find it) and ``server`` (``StubApiServer``:
lifecycle, request dispatch, test controls).
"""

from .kubeconfig import kubeconfig_for, write_kubeconfig
from .server import StubApiServer

__all__ = ["StubApiServer", "kubeconfig_for", "write_kubeconfig"]
