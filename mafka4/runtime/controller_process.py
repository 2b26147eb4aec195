"""The controller's process: joins Ray and etcd and runs a ``Controller`` until SIGTERM or SIGINT.

    python -m mafka4.runtime.controller_process --etcd HOST:PORT[,HOST:PORT...] --ray-address ADDR --cluster NAME --controller-id ID

The local daemon (``runtime.daemon``) starts one as its child; on a Ray cluster the head's start
commands do (``ray_cluster.yaml``). Several may run: one is active, the others stand by
(``coordinator.control.controller``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from mafka4.coordinator.control.controller import Controller
from mafka4.limits import parse_setting, replace_config
from mafka4.limits.servers import ControllerConfig
from mafka4.runtime.environment import apply_ray_environment
from mafka4.transport.ray_names import NAMESPACE

log = logging.getLogger("mafka4.controller")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = ControllerConfig()
    parser = argparse.ArgumentParser(prog="python -m mafka4.runtime.controller_process", description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", required=True, help="etcd endpoint HOST:PORT, or every member of an etcd cluster: HOST:PORT,HOST:PORT,...")
    parser.add_argument("--ray-address", required=True, help="GCS address of the Ray cluster")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--controller-id", required=True)
    parser.add_argument("--lease-ttl-s", type=int, default=defaults.lease_ttl_s)
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="another ControllerConfig field, e.g. vp_merge_delay_ms=5000 (repeatable)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    apply_ray_environment()
    import ray  # after the environment: Ray reads it at import

    ray.init(address=args.ray_address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    settings = dict(parse_setting(text) for text in args.setting)
    config = replace_config(ControllerConfig(), **{"lease_ttl_s": args.lease_ttl_s, **settings})
    controller = Controller(args.etcd, args.cluster, args.controller_id, config)
    log.info("controller %s started for cluster %r (etcd %s, Ray %s)", args.controller_id, args.cluster, args.etcd, args.ray_address)
    try:
        controller.run(stop)
    finally:
        ray.shutdown()
    log.info("controller %s stopped", args.controller_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
