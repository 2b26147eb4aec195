"""``mafka4 chaos``: the command line of ``simulations.chaos.run``.

Registering the command imports only the settings; the driver (Ray, the client) is imported
when the command runs.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path

from mafka4.planted_bugs import PlantedBug
from simulations.chaos.settings import ETCD_MEMBER_CHOICES, FAULT_KINDS, ChaosSettings


def _fault_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


# Exit codes: a pass, a failed verdict (as ``python3 -m simulations.dst`` for a failed seed),
# and mafka4's usage error (``mafka4.cli.main``; argparse exits 2 too).
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EPILOG = f"""\
verdict: the run fails on any checker anomaly, a committed offset moving back, a cluster
that did not heal within the heal bound, a member the nemesis did not kill exiting
abnormally, or a replica log that could not be read; the report's "verdict" section lists
every reason. The heal bound is {ChaosSettings().heal_timeout_s:g} s.

--planted-bug NAME runs the throwaway cluster with one of mafka4.planted_bugs planted in its
cores: the verdict is then expected to fail on an anomaly, and the last lines say whether the
bug was caught.

exit codes:
  {EXIT_PASSED}  the verdict passed
  {EXIT_FAILED}  the verdict failed (the report and the last lines printed name every reason),
     or an error stopped the run before its verdict (an error message, no report)
  {EXIT_USAGE}  usage error: a bad option or setting (no run)
"""


def add_chaos_parser(commands) -> None:
    defaults = ChaosSettings()
    chaos = commands.add_parser("chaos", help="seeded random faults on a throwaway cluster under a keyed workload, "
                                              "judged by history checkers and a strict verdict",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    chaos.add_argument("--seed", type=int, help="seed of the fault sequence (default: a random one, printed)")
    chaos.add_argument("--duration-s", type=float, default=defaults.duration_s, help="fault phase (default %(default)s)")
    chaos.add_argument("--rate-msgs-per-s", type=int, default=defaults.rate_msgs_per_s, help="default %(default)s")
    chaos.add_argument("--faults", type=_fault_list, default=",".join(FAULT_KINDS),
                       help="comma-separated fault kinds (default all: %(default)s)")
    chaos.add_argument("--members", type=int, default=defaults.members, help="consumer-group members (default %(default)s)")
    chaos.add_argument("--lanes", type=int, default=defaults.lanes,
                       help="lanes the producer sends in beside the trunk, round robin, read by the members by "
                            "fallback (default %(default)s)")
    chaos.add_argument("--delayed-share", type=float, default=defaults.delayed_share,
                       help="share of the messages sent with a delay, from 1000 ms to --delay-ms-max "
                            "(default %(default)s)")
    chaos.add_argument("--delay-ms-max", type=int, default=defaults.delay_ms_max,
                       help="longest delay of a delayed message, ms (default %(default)s)")
    chaos.add_argument("--nack-share", type=float, default=defaults.nack_share,
                       help="share of the messages the members nack on their first delivery; they come again from "
                            "the group's retry topic (default %(default)s)")
    chaos.add_argument("--poison-share", type=float, default=defaults.poison_share,
                       help="share of the messages the members nack on every delivery, until they are "
                            f"dead-lettered on delivery {defaults.retry_policy.deliveries_max} (default %(default)s)")
    chaos.add_argument("--etcd-members", type=int, choices=ETCD_MEMBER_CHOICES, default=defaults.etcd_members,
                       help="members of the throwaway cluster's etcd; kill-etcd-member needs 3 (default %(default)s)")
    chaos.add_argument("--resource-sample-s", type=float, default=defaults.resource_sample_s,
                       help="how often every process's RSS and open fds and etcd's keys are sampled for the "
                            "report's resources section (default %(default)s)")
    chaos.add_argument("--planted-bug", choices=[bug.value for bug in PlantedBug],
                       help="plant this bug in the cluster's cores (mafka4.planted_bugs), to show that the checkers "
                            "catch it; default none")
    chaos.add_argument("--out", default="results/chaos.json", help="JSON report path (default %(default)s)")
    chaos.set_defaults(run=_cmd_chaos)


def _cmd_chaos(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    settings = ChaosSettings(seed=seed, duration_s=args.duration_s, rate_msgs_per_s=args.rate_msgs_per_s,
                             faults=args.faults, members=args.members, lanes=args.lanes,
                             delayed_share=args.delayed_share, delay_ms_max=args.delay_ms_max,
                             nack_share=args.nack_share, poison_share=args.poison_share, etcd_members=args.etcd_members,
                             resource_sample_s=args.resource_sample_s, planted_bug=args.planted_bug)
    planted = f", planted bug {settings.planted_bug}" if settings.planted_bug else ""
    print(f"chaos: seed {seed}, {settings.duration_s:g} s of faults ({','.join(settings.faults)}), "
          f"{settings.rate_msgs_per_s} msgs/s ({settings.delayed_share:g} delayed), {settings.members} members "
          f"(nacking {settings.nack_share:g} once, {settings.poison_share:g} always), "
          f"{settings.etcd_members} etcd member(s)"
          f"{planted}", flush=True)
    from simulations.chaos.run import run_chaos, summary  # starts clusters: imported only to run

    out = Path(args.out)
    out.unlink(missing_ok=True)  # a run stopped by an error must not leave an older run's report behind
    report = run_chaos(settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"full report written to {out}", file=sys.stderr)
    return EXIT_PASSED if report["verdict"]["passed"] else EXIT_FAILED
