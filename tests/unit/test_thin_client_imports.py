"""The client's way in imports neither Ray nor etcd: it speaks only the client protocol (issue 36).

Checked in a fresh interpreter, the way the purity test checks cores. The whole of
``mafka4.client`` joins this list as its Producer and Consumer move onto the client port.
"""

from __future__ import annotations

import subprocess
import sys

THIN_CLIENT_MODULES = ("mafka4.client.bootstrap", "mafka4.client.node_connection", "mafka4.client.cluster_metadata",
                       "mafka4.client.security_admin", "mafka4.cli.topics", "mafka4.cli.security")
FORBIDDEN = ("ray", "etcd3", "grpc")


def test_the_thin_client_imports_neither_ray_nor_etcd():
    program = (f"import sys; import {', '.join(THIN_CLIENT_MODULES)}; "
               f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))")
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert found == [], f"importing the thin client imported {found}"
