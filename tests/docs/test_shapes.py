"""The comparison of a documented answer with a live one catches drift, and only drift."""

from __future__ import annotations

from tests.docs.shapes import ABRIDGED, differences, documented_json


def test_the_marks_of_what_a_document_left_out_are_read_in_objects_lists_and_strings() -> None:
    text = '{"a": [1, ...], ..., "b": {"c": "x ... y"}, "d": [..., 3]}'
    assert documented_json(text) == {
        "a": [1, ABRIDGED],
        ABRIDGED: None,
        "b": {"c": "x ... y"},
        "d": [ABRIDGED, 3],
    }
    assert documented_json('{"x": 1, ...}') == {"x": 1, ABRIDGED: None}
    assert documented_json("[1, \u2026]") == [1, ABRIDGED]


def test_a_field_the_answer_has_and_the_document_does_not_show_is_a_difference() -> None:
    shown = documented_json('{"pid": 1, "pod": "p"}')
    assert differences(shown, {"pid": 1, "pod": "p"}) == []
    assert differences(shown, {"pid": 1, "pod": "p", "allocation": "ALLOCATED"}) == [
        "$: the document does not show ['allocation']"
    ]
    assert differences(shown, {"pid": 1}) == ["$: the answer has no ['pod']"]
    assert differences(documented_json('{"pid": 1, ...}'), {"pid": 1, "pod": "p"}) == []


def test_names_must_be_equal_and_readings_alike_in_kind() -> None:
    shown = {"name": "gpu-node-0", "utilizationGpu": 66, "memoryUsedBytes": None}
    assert (
        differences(shown, {"name": "gpu-node-0", "utilizationGpu": 3, "memoryUsedBytes": None})
        == []
    )
    assert differences(shown, {"name": "gpu-node-9", "utilizationGpu": 3, "memoryUsedBytes": None})
    assert differences(
        shown, {"name": "gpu-node-0", "utilizationGpu": None, "memoryUsedBytes": None}
    )
    assert differences(shown, {"name": "gpu-node-0", "utilizationGpu": 3, "memoryUsedBytes": 0})
    # 1 is not true, nor 0 null.
    assert differences({"index": 1}, {"index": True})
    assert differences({"gpuRequest": None}, {"gpuRequest": 0})


def test_a_list_shows_every_item_unless_abridged_and_then_its_items_in_order() -> None:
    answer = [{"pid": 1}, {"pid": 2}, {"pid": 3}]
    assert differences([{"pid": 1}, {"pid": 2}], answer)
    assert differences(documented_json('[{"pid": 1}, {"pid": 3}, ...]'), answer) == []
    assert differences(documented_json('[{"pid": 3}, {"pid": 1}, ...]'), answer)
    assert differences(documented_json('[{"pid": 4}, ...]'), answer)


def test_a_message_matches_across_ports_retries_and_left_out_parts() -> None:
    shown = (
        "agent on node 'n' unreachable at 127.0.0.5:51405: UNAVAILABLE: ... refused"
        " (next retry in 1.0 s)"
    )
    live = "agent on node 'n' unreachable at 127.0.0.5:40001: UNAVAILABLE: failed: refused"
    assert differences({"message": shown}, {"message": live}) == []
    fresh = live.replace("UNAVAILABLE", "GetUsage: UNAVAILABLE")
    assert differences({"message": shown}, {"message": fresh}) == []
    assert differences({"message": shown}, {"message": live.replace("node 'n'", "node 'm'")})
    assert differences({"message": "a ... z"}, {"message": "a b c z"}) == []
    assert differences({"message": "a ... z"}, {"message": "b z"})
