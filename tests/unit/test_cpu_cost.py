"""``bench.cpu_cost``: a drain's CPU per message, its members' and the whole machine's."""

from __future__ import annotations

import pytest

from mafka4.bench.cpu_cost import MachineCpu, busy_ticks, cpu_per_message

# /proc/stat of a 2-CPU machine (proc(5)): user nice system idle iowait irq softirq steal guest guest_nice
PROC_STAT = """cpu  1000 20 300 9000 50 4 6 700 0 0
cpu0 500 10 150 4500 25 2 3 350 0 0
cpu1 500 10 150 4500 25 2 3 350 0 0
intr 12345
"""


def test_busy_ticks_count_user_nice_system_irq_and_softirq_not_idle_iowait_or_steal():
    assert busy_ticks(PROC_STAT) == 1000 + 20 + 300 + 4 + 6


def test_a_text_that_does_not_start_with_the_all_cpu_line_is_refused():
    with pytest.raises(AssertionError, match="all-CPU line"):
        busy_ticks("cpu0 1 2 3 4 5 6 7\n")


def test_the_figures_per_message_split_the_machine_into_members_and_the_rest():
    before, after = MachineCpu(at_ns=0, busy_ticks=100), MachineCpu(at_ns=2_000_000_000, busy_ticks=400)
    # 300 ticks at 100 per second: 3 CPU seconds in a 2 s window, 1.5 of them the members'
    figures = cpu_per_message([1_000_000_000, 500_000_000, None], before, after, ticks_per_s=100,
                              messages_read=1_000_000)
    assert figures == {"member_cpu_us_per_message": 1.5, "machine_cpu_us_per_message": 3.0,
                       "rest_cpu_us_per_message": 1.5, "machine_busy_cores": 1.5}


def test_a_machine_figure_a_tick_short_of_the_members_leaves_no_negative_rest():
    before, after = MachineCpu(0, 0), MachineCpu(1_000_000_000, 99)
    figures = cpu_per_message([1_000_000_000], before, after, ticks_per_s=100, messages_read=1000)
    assert figures["rest_cpu_us_per_message"] == 0 and figures["machine_cpu_us_per_message"] == 990.0


def test_a_drain_that_read_nothing_has_no_figure_per_message():
    figures = cpu_per_message([None], MachineCpu(0, 0), MachineCpu(2_000_000_000, 0), ticks_per_s=100,
                              messages_read=0)
    assert figures["member_cpu_us_per_message"] is None and figures["machine_cpu_us_per_message"] is None
    assert figures["machine_busy_cores"] == 0


def test_a_window_too_short_for_the_machines_ticks_has_no_machine_figures():
    figures = cpu_per_message([2_000_000], MachineCpu(0, 100), MachineCpu(50_000_000, 100), ticks_per_s=100,
                              messages_read=1000)
    assert figures == {"member_cpu_us_per_message": 2.0, "machine_cpu_us_per_message": None,
                       "rest_cpu_us_per_message": None, "machine_busy_cores": None}
