"""Fuzzing every public input that is not a batch: names, configs, enum settings.

A user may type anything: a name or a setting is either accepted or refused with the error
type documented for it (``InvalidTopicName``, ``InvalidGroupName``, ``InvalidConfig``),
never another exception.

``MAFKA4_FUZZ_EXAMPLES`` (default 40) scales the number of examples of every fuzz test here.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mafka4 import limits
from mafka4.limits import servers
from mafka4.compression import Codec
from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.errors import InvalidConfig, InvalidGroupName, InvalidTopicName
from mafka4.names import validate_topic_name
from mafka4.risr.state import RisrConfig
from mafka4.virtual.layout import VirtualConfig

EXAMPLES = int(os.environ.get("MAFKA4_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONFIGS = (servers.LogConfig, servers.ReplicaConfig, limits.TopicConfig, limits.ProducerConfig, limits.ConsumerConfig,
           servers.ClusterConfig, servers.ControllerConfig, servers.FeederConfig, RisrConfig, VirtualConfig,
           servers.ClientPortConfig)

anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 2**20), st.floats(allow_nan=True), st.text(max_size=12),
    st.binary(max_size=6), st.lists(st.integers(), max_size=2), st.sampled_from(list(limits.Acks) + list(limits.OnFull) + list(limits.ReadMode)),
    st.sampled_from(list(Codec)),
    st.sampled_from(["all", "1", "0", "-1", "block", "error", "earliest", "latest", "range", "sticky", "mafka4", "mafka3",
                     "none", "lz4", "zstd"]),
)


@FUZZ
@given(anything | st.text(alphabet=st.characters(), max_size=250))
def test_a_topic_name_is_accepted_or_refused_with_invalid_topic_name(name):
    try:
        assert validate_topic_name(name) == name
    except InvalidTopicName as error:
        assert str(error)


@FUZZ
@given(anything | st.text(alphabet=st.characters(), max_size=250))
def test_a_group_name_is_accepted_or_refused_with_invalid_group_name(name):
    try:
        assert validate_group_name(name) == name
    except InvalidGroupName as error:
        assert str(error)


@FUZZ
@given(st.sampled_from(CONFIGS), st.data())
def test_a_config_with_arbitrary_values_is_built_or_refused_with_invalid_config(config_class, data):
    names = [field.name for field in dataclasses.fields(config_class)]
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)), label="fields")
    values = {name: data.draw(anything, label=name) for name in chosen}
    try:
        config_class(**values)
    except InvalidConfig as error:
        assert str(error)


@FUZZ
@given(st.sampled_from(CONFIGS), st.dictionaries(st.text(max_size=10), anything,
                                                 max_size=3))
def test_replace_config_with_arbitrary_settings_raises_only_invalid_config(config_class, changes):
    try:
        limits.replace_config(config_class(), **changes)
    except InvalidConfig as error:
        assert str(error)


def test_a_setting_named_config_is_refused_with_invalid_config():
    with pytest.raises(InvalidConfig):
        limits.replace_config(servers.LogConfig(), config=1)


@FUZZ
@given(anything)
def test_enum_settings_parse_or_raise_invalid_config(value):
    for parse in (limits.Acks.parse, limits.OnFull.parse, limits.OffsetReset.parse, limits.ReadMode.parse):
        try:
            parse(value)
        except InvalidConfig as error:
            assert str(error)
