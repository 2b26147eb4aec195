"""``exported_variable`` sets a variable for a block and puts back exactly what was there before."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mafka4.exported_variables import exported_variable

NAME = "MAFKA4_TEST_EXPORTED_VARIABLE"


@pytest.fixture(autouse=True)
def absent():
    os.environ.pop(NAME, None)
    yield
    os.environ.pop(NAME, None)


def test_a_variable_absent_before_is_set_meanwhile_and_absent_again_after():
    with exported_variable(NAME, "on"):
        assert os.environ[NAME] == "on"
    assert NAME not in os.environ


def test_a_variable_set_before_gets_its_previous_value_back():
    os.environ[NAME] = "before"
    with exported_variable(NAME, "during"):
        assert os.environ[NAME] == "during"
    assert os.environ[NAME] == "before"


def test_none_unsets_the_variable_meanwhile_and_restores_it_after():
    os.environ[NAME] = "before"
    with exported_variable(NAME, None):
        assert NAME not in os.environ
    assert os.environ[NAME] == "before"


def test_none_on_an_absent_variable_leaves_it_absent():
    with exported_variable(NAME, None):
        assert NAME not in os.environ
    assert NAME not in os.environ


def test_the_previous_value_comes_back_when_the_block_raises():
    os.environ[NAME] = "before"
    with pytest.raises(RuntimeError, match="body failed"):
        with exported_variable(NAME, "during"):
            raise RuntimeError("body failed")
    assert os.environ[NAME] == "before"
    with pytest.raises(RuntimeError, match="body failed"):
        with exported_variable("MAFKA4_TEST_EXPORTED_ABSENT", "during"):
            raise RuntimeError("body failed")
    assert "MAFKA4_TEST_EXPORTED_ABSENT" not in os.environ


def test_blocks_nest_and_unwind_in_order():
    with exported_variable(NAME, "outer"):
        with exported_variable(NAME, "inner"):
            assert os.environ[NAME] == "inner"
        assert os.environ[NAME] == "outer"
    assert NAME not in os.environ


def test_processes_started_meanwhile_inherit_the_value():
    with exported_variable(NAME, "inherited"):
        seen = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{NAME}'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert seen == "inherited"
