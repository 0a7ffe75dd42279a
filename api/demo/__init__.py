"""``gpugraph demo``: a simulated GPU cluster on loopback, served by the real server.

``api.demo.cluster`` is the simulated cluster itself (stub API server, pod and
node manifests, fake ``/proc``); the rest of this package stages a scenario on
it (``scenario``) and runs the real server and agents against it (``runner``;
its command line in ``command``).
"""
