"""A read node's load report: JSON both ways, and a report that does not hold together is refused by name."""

import pytest

from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad

REPORT = ReadNodeLoad("r0", hosted_vp_replicas=12, fed_bytes_per_s=256_000.0, fetch_cpu_cores=0.25,
                      window_ms=10_000, measured_at_ms=1_700_000_000_000, sealed_vp_replicas=3)


def test_a_report_survives_json():
    assert ReadNodeLoad.from_json(REPORT.to_json()) == REPORT


def test_a_report_from_a_node_that_does_not_tell_sealed_replicas_apart_still_parses_with_none_sealed():
    old = {name: value for name, value in REPORT.to_json().items() if name != "sealed_vp_replicas"}
    parsed = ReadNodeLoad.from_json(old)
    assert parsed.sealed_vp_replicas == 0 and parsed.hosted_vp_replicas == 12
    assert parsed == ReadNodeLoad("r0", 12, 256_000.0, 0.25, 10_000, 1_700_000_000_000)


@pytest.mark.parametrize("field, value", [("hosted_vp_replicas", -1), ("hosted_vp_replicas", 1.5),
                                          ("sealed_vp_replicas", -1), ("sealed_vp_replicas", "3"),
                                          ("fed_bytes_per_s", float("nan")), ("fetch_cpu_cores", -0.1),
                                          ("window_ms", 0), ("measured_at_ms", -5), ("node_id", "")])
def test_a_field_out_of_bounds_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        ReadNodeLoad.from_json({**REPORT.to_json(), field: value})


def test_a_report_missing_fields_names_them():
    with pytest.raises(ValueError, match="lacks fed_bytes_per_s, window_ms"):
        ReadNodeLoad.from_json({name: value for name, value in REPORT.to_json().items()
                                if name not in ("fed_bytes_per_s", "window_ms")})


def test_the_load_key_is_parsed_back_to_its_node_and_nothing_else():
    key = keys.read_node_load("c", "r3")
    assert keys.parse_read_node_load("c", key) == "r3"
    assert keys.parse_read_node_load("c", keys.read_node_liveness("c", "r3")) is None
    assert keys.parse_read_node_load("c2", key) is None
