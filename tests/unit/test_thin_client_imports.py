"""The client's way in imports neither Ray nor etcd: it speaks only the client protocol (issue 36).

Nor the SCRAM library the nodes run on (and its TLS certificate parser): a client command pays for
every import on each start, and the client's side of SCRAM needs only the standard library. Nor
the module that runs etcd (``runtime.etcd_server``): a client reads the local cluster's record
(``runtime.state``), whose etcd members are plain values (``runtime.etcd_member``). Nor the
servers' configs (``limits.servers``), each a dataclass built at import for nothing. Nor pickle:
the client protocol's frames are msgpack, and only the stream calls between a cluster's
processes unpickle (``transport.stream_pickles``).

Checked in a fresh interpreter, the way the purity test checks cores: the Producer and the
Consumer (group members of both read modes included), the topic, user and ACL commands and the
group commands (``client.group_admin``) are on it. ``Admin`` (``client.admin``) still runs
against etcd and Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

THIN_CLIENT_MODULES = ("mafka4.client.bootstrap", "mafka4.client.node_connection", "mafka4.client.cluster_metadata",
                       "mafka4.client.security_admin", "mafka4.cli.security",
                       "mafka4.client.topic_admin", "mafka4.cli.topics", "mafka4.client.producer",
                       "mafka4.client.virtual_consumer", "mafka4.client.partition_fetcher", "mafka4.client.consumer",
                       "mafka4.client.virtual_group_consumer", "mafka4.client.remote_member",
                       "mafka4.client.group_link", "mafka4.cli.clients", "mafka4.client.group_admin",
                       "mafka4.cli.groups")
FORBIDDEN = ("ray", "etcd3", "grpc", "scramp", "asn1crypto", "mafka4.runtime.etcd_server", "mafka4.limits.servers",
             "pickle", "mafka4.transport.stream_pickles")


# What `mafka4 topic list` never uses, and would pay for on every start (issue 36): the codecs (it
# compresses nothing), the data APIs (it asks METADATA only), the topics' partition states (it
# reads their names), ACL rules (it sends none: the node checks them), and the modules of other
# commands.
NOT_LISTING_TOPICS = ("lz4", "zstandard", "mafka4.protocol.data_api", "mafka4.client.leader_routes",
                      "mafka4.physical.partition_state", "mafka4.security.acl", "mafka4.cli.bench",
                      "mafka4.cli.clients", "mafka4.cli.cluster", "mafka4.cli.groups", "mafka4.cli.security")

# What `mafka4 produce` never uses (issue 36): the read path's records and layouts (a producer
# routes each key to a physical partition), ACL rules, and the modules of other commands.
NOT_PRODUCING = ("mafka4.virtual.vp_records", "mafka4.virtual.layout", "mafka4.security.acl", "mafka4.cli.bench",
                 "mafka4.cli.cluster", "mafka4.cli.groups", "mafka4.cli.security", "mafka4.cli.topics")


def imported(modules: tuple[str, ...], forbidden: tuple[str, ...], then: str = "pass") -> list[str]:
    """The ``forbidden`` modules, and modules of ``forbidden`` packages, that a fresh interpreter holds
    after importing ``modules`` and running ``then``."""
    program = (f"import sys; import {', '.join(modules)}; {then}; "
               f"print(' '.join(sorted(m for m in sys.modules "
               f"if any(m == f or m.startswith(f + '.') for f in {forbidden!r}))))")
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()


def test_the_thin_client_imports_neither_ray_nor_etcd_nor_the_servers_scram_library():
    found = imported(THIN_CLIENT_MODULES, FORBIDDEN)
    assert found == [], f"importing the thin client imported {found}"


def test_listing_topics_imports_no_codec_no_data_api_and_no_other_command():
    found = imported(("mafka4.cli", "mafka4.client.cluster_metadata"), NOT_LISTING_TOPICS,
                     then="mafka4.cli.build_parser('topic').parse_args(['topic', 'list'])")
    assert found == [], f"mafka4 topic list imported {found}"


def test_producing_imports_no_read_path_module_and_no_other_command():
    found = imported(("mafka4.cli", "mafka4.client.producer"), NOT_PRODUCING,
                     then="mafka4.cli.build_parser('produce').parse_args(['produce', 't'])")
    assert found == [], f"mafka4 produce imported {found}"


@pytest.mark.parametrize("command", [["topic", "list"], ["group", "list"]])
def test_a_client_command_that_fails_imports_no_ray_to_report_it(tmp_path, command):
    program = (f"import sys; from mafka4 import cli; code = cli.main({command!r}); "
               "print(code, ' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'ray')) or '-')")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                         env={**os.environ, "MAFKA4_HOME": str(tmp_path)})
    assert ran.stdout.split() == ["1", "-"], ran.stdout + ran.stderr
    assert "no local cluster" in ran.stderr


def test_a_cluster_command_on_a_client_install_names_the_extra_to_install(tmp_path):
    """A client install leaves the "server" extra out: ``mafka4 up`` says what to install, not a traceback."""
    program = ("import sys\n"
               "class Absent:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('ray', 'psutil', 'etcd3'):\n"
               "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
               "sys.meta_path.insert(0, Absent())\n"
               "from mafka4 import cli\n"
               "print(cli.main(['up']))\n")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                         env={**os.environ, "MAFKA4_HOME": str(tmp_path)})
    assert ran.stdout.split() == ["2"], ran.stdout + ran.stderr
    assert 'pip install "mafka4[server]"' in ran.stderr
