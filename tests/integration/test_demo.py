"""``mafka4 demo`` end to end: the first command of the README shows the product and passes its own verdict.

The demo starts a throwaway cluster of its own (so it runs with the tests that do, after the
shared clusters stopped), grows a group from 1 to 4 members while a producer writes, and
judges what the group read. Its output is what a new user reads, so the lines checked here
are the ones the README promises: a split per join read from the cluster, the drain, and the
verdict.
"""

from __future__ import annotations

import re
import subprocess
import sys

DEMO_TIMEOUT_S = 300  # the demo takes under a minute; a loaded machine gets room before the test gives up


def test_the_demo_splits_a_vp_per_join_and_reads_every_message_once_in_order_per_key():
    run = subprocess.run([sys.executable, "-m", "mafka4.cli", "demo"], capture_output=True, text=True,
                         timeout=DEMO_TIMEOUT_S)
    lines = [re.sub(r"^\[\s*\d+\.\d s\] ", "", line) for line in run.stdout.splitlines()]
    assert run.returncode == 0, run.stdout + run.stderr
    assert all(re.match(r"\[\s*\d+\.\d s\] ", line) for line in run.stdout.splitlines()), "every step has its time"
    joins = [index for index, line in enumerate(lines) if re.fullmatch(r"member m\d joins group 'demo-group' .*", line)]
    splits = [index for index, line in enumerate(lines) if line.startswith("  split (epoch ")]
    assert len(joins) == 4 and len(splits) == 3, run.stdout
    # Each join after the first splits a VP, and the split is printed before the next member joins.
    assert all(joins[k + 1] < splits[k] < joins[k + 2] for k in range(2)) and joins[3] < splits[2], run.stdout
    assert lines[splits[0]].startswith("  split (epoch 1): v0 -> v1 + v2, cut at the physical offsets p0@"), run.stdout
    assert sum(1 for line in lines if re.fullmatch(r"  settled \d+\.\d s after the join: every member owns a VP", line)) == 4
    assert any(re.fullmatch(r"  owners: (v\d+ on r[01] -> m[1-4], ){3}v\d+ on r[01] -> m[1-4]", line)
               for line in lines), "four members own one VP each"
    assert "group 'demo-group' after the drain (mafka4 group describe demo-group): total lag 0" in lines
    verdict = [line for line in lines if line.startswith("verdict: ")]
    assert len(verdict) == 3 and re.fullmatch(
        r"verdict: exactly once: [\d,]+ acknowledged messages, each read once by the group", verdict[0]), run.stdout
    assert verdict[1:] == ["verdict: per-key order: 24 keys, each written at ascending offsets of one partition and "
                           "read in production order", "verdict: PASSED"]
    assert re.fullmatch(r"demo passed in \d+\.\d s", lines[-1])
