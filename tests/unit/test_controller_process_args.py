"""The controller's process command line: node agents are off unless asked for, and their settings are checked."""

from __future__ import annotations

import pytest

from mafka4.limits import CLIENT_PORT_DEFAULT
from mafka4.runtime.controller_process import _parse_args

REQUIRED = ["--etcd", "127.0.0.1:2379", "--ray-address", "127.0.0.1:6379", "--cluster", "c", "--controller-id", "c0"]


def test_node_agents_are_off_by_default_beside_mafka4_up_and_shell_agents():
    args = _parse_args(REQUIRED)
    assert args.node_agents is False and args.node_client_port == CLIENT_PORT_DEFAULT


def test_node_agents_take_the_shell_agents_settings():
    args = _parse_args([*REQUIRED, "--node-agents", "--node-data-dir", "/data", "--node-lease-ttl-s", "30",
                        "--node-client-port", "0"])
    assert (args.node_agents, str(args.node_data_dir), args.node_lease_ttl_s, args.node_client_port) == (
        True, "/data", 30, 0)


@pytest.mark.parametrize("arguments, says", [
    (["--node-lease-ttl-s", "1"], "node_lease_ttl_s=1 must be at least 2"),
    (["--node-client-port", "70000"], "--node-client-port 70000 is not a TCP port"),
    (["--metrics-port", "-1"], "--metrics-port -1 is not a TCP port"),
])
def test_bad_node_agent_settings_are_refused_before_anything_starts(arguments, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parse_args([*REQUIRED, "--node-agents", *arguments])
    assert exit_info.value.code == 2 and says in capsys.readouterr().err
