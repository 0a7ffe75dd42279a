"""A GPU event's graph object: an XID the catalog does not list still shows its number."""

from __future__ import annotations

from graph_schema.occupancy.event_fan_out import NodeEvent
from graph_schema.occupancy.events import GpuEventKind, event_object
from node_resolver.gpu_events.records import EventProcess, GpuEvent
from node_resolver.gpu_events.records import GpuEventKind as RecordedKind


def test_an_xid_not_in_the_catalog_shows_its_number_without_a_description() -> None:
    process = EventProcess(7, process_name="python3", pod_namespace="ml", pod_name="train")
    event = GpuEvent(
        time=1_764_870_292.5, kind=RecordedKind.XID, gpu_uuid="GPU-0", xid=999,
        culprit_pid=7, processes=(process,),
    )  # fmt: skip
    shown = event_object(NodeEvent(event, "node-a"), [process], 0, sees_unowned=True)
    assert (shown.kind, shown.xid, shown.description) == (GpuEventKind.XID, 999, None)
    assert shown.culprit is not None and shown.culprit.pid == 7
    known = event_object(
        NodeEvent(GpuEvent(1.0, RecordedKind.XID, "GPU-0", xid=79), "node-a"),
        [],
        0,
        sees_unowned=True,
    )
    assert known.xid == 79 and known.description == "GPU has fallen off the bus"
