"""The controller's intent worker: executes the clients' intents, oldest first, one at a time.

A thread of the active controller (``Controller`` starts it on activation and stops it when it
steps down). It learns of new intents from a watch on ``keys.intents_prefix`` (and looks anyway
every ``INTENT_IDLE_LOOK_INTERVAL_S``), and for each pending intent (``metadata.intents``):

1. marks it started by a compare-and-swap fenced by the controller's key (a client that gave up
   can then no longer withdraw it, and a deposed controller starts nothing);
2. carries it out: ``topic_control.create_topic`` / ``delete_topic``, or a split, merge, scale
   or lane opening by ``control.resharding.Resharder`` (whose epoch transaction is fenced by the controller's
   key too, so a reshard still running when this controller was deposed stores nothing);
3. writes the result under a lease of ``intent_result_ttl_s`` and deletes the intent in one
   transaction fenced by the controller's key.

VPs a read node did not take (a node down at that moment) are handed to the controller's repair
queue (``on_unhosted``). An intent whose execution raised something else than a ``MafkaError``
(a defect) is answered with that error's text, logged with its traceback, and not retried.

Intents run on their own thread so that a slow one (topic creation starts actors; a reshard
waits for feed streams to reach a cut) never delays failovers on the controller's main loop.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from mafka4.clocks import wall_ms_fine
from mafka4.coordinator.control.read_path_decisions import VirtualPartitionItem
from mafka4.coordinator.control.resharding import Resharded, Resharder
from mafka4.coordinator.control.topic_control import create_topic, delete_topic
from mafka4.errors import CoordinatorUnavailable, MafkaError
from mafka4.limits import CONTROLLER_ETCD_BACKOFF_S, INTENT_IDLE_LOOK_INTERVAL_S
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.intents import Intent, IntentKind, IntentResult
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.metrics.controller_counters import ControllerCounters, reshard_kind
from mafka4.names import validate_lane_name
from mafka4.physical.partition_state import config_from_json
from mafka4.virtual.layout import LanePolicy
from mafka4.virtual.vp_state import epoch_to_json

log = logging.getLogger("mafka4.controller")


class IntentWorker:
    def __init__(self, etcd_endpoint: str, cluster: str, config: ControllerConfig, fence: Fence,
                 on_unhosted: Callable[[set[VirtualPartitionItem]], None], counters: ControllerCounters | None = None):
        self._endpoint, self._cluster, self._config, self._fence = etcd_endpoint, cluster, config, fence
        self._counters = counters if counters is not None else ControllerCounters("")  # reshards, by kind
        self._on_unhosted = on_unhosted
        self._store = MetadataStore(etcd_endpoint)
        self._resharder = Resharder(self._store, cluster, fence)  # one per term: it keeps the read nodes' handles
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._watch_id: int | None = None
        self._thread = threading.Thread(target=self._run, name="controller-intents", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the intent in progress (if any); the next controller executes the rest."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        if self._watch_id is not None:
            self._store.cancel_watch(self._watch_id)
        self._store.close()

    # --- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
                self._wake.clear()
                pending = self._store.get_prefix(keys.intents_prefix(self._cluster))
                for item in pending:  # keys sort by id: submission order
                    if self._stop.is_set():
                        return
                    intent_id = item.key[len(keys.intents_prefix(self._cluster)):]
                    if "started_by" in item.value and item.value.get("controller_fence") == self._fence[1]:
                        continue  # started by this term already (a repeat read): its result is on the way
                    self._execute(Intent.from_json(intent_id, item.value, item.mod_revision), item.value)
                if not pending:
                    self._wake.wait(INTENT_IDLE_LOOK_INTERVAL_S)
            except CoordinatorUnavailable as error:
                log.warning("intents wait for etcd: %s", error)
                self._drop_watch()
                self._stop.wait(CONTROLLER_ETCD_BACKOFF_S)

    def _watch(self) -> None:
        if self._watch_id is None:
            self._watch_id = self._store.watch_prefix(keys.intents_prefix(self._cluster), lambda _: self._wake.set(),
                                                      self._drop_watch)

    def _drop_watch(self) -> None:
        self._watch_id = None
        self._wake.set()

    def _execute(self, intent: Intent, value: dict) -> None:
        taken_ms = wall_ms_fine()
        key = keys.intent(self._cluster, intent.intent_id)
        started = {**value, "started_by": "controller", "controller_fence": self._fence[1]}
        if not self._store.compare_and_swap(key, started, intent.revision, self._fence):
            return  # withdrawn by its client, or this controller was deposed
        log.info("executing %s", intent)
        try:
            result = IntentResult(True, self._carry_out(intent, taken_ms))
        except MafkaError as error:
            result = IntentResult.of_error(error)
            log.warning("%s failed: %s", intent, error)
        except Exception as error:  # a defect: answer it rather than leave the client waiting
            log.exception("%s failed", intent)
            result = IntentResult(False, None, "MafkaError", f"the controller failed to carry out {intent}: {error!r}")
        lease = self._store.grant_lease(self._config.intent_result_ttl_s)
        if not self._store.put_and_delete(keys.intent_result(self._cluster, intent.intent_id), result.to_json(), key,
                                          self._fence, lease):
            log.warning("%s: result not recorded, this controller was deposed", intent)

    # --- what each kind does --------------------------------------------------------------

    def _carry_out(self, intent: Intent, taken_ms: float):
        store, cluster, topic = self._store, self._cluster, intent.topic
        if intent.kind is IntentKind.CREATE_TOPIC:
            created = create_topic(store, cluster, self._endpoint, topic, config_from_json(intent.args["config"]))
            self._unhosted(topic, created.unhosted)
            return {"partitions": len(created.metadata.partitions)}
        if intent.kind is IntentKind.DELETE_TOPIC:
            delete_topic(store, cluster, topic)
            return {}
        resharder = self._resharder
        if intent.kind is IntentKind.SPLIT:
            # A traced join's split (``mafka4.join_trace``) answers with when each of its steps happened.
            stamps = [("intent_taken", taken_ms)] if intent.args.get("trace") else None
            done = self._reshaped(topic, [resharder.split(topic, int(intent.args["vp"]), stamps)])
            return done if stamps is None else {**done, "trace": stamps}
        if intent.kind is IntentKind.OPEN_LANE:
            policy = LanePolicy(str(intent.args["fallback"]), int(intent.args["priority"]))
            lane_id, opened = resharder.open_lane(topic, validate_lane_name(str(intent.args["lane"])), policy)
            return {**self._reshaped(topic, [] if opened is None else [opened]), "lane_id": lane_id}
        if intent.kind is IntentKind.MERGE:
            return self._reshaped(topic, [resharder.merge(topic, int(intent.args["first"]), int(intent.args["second"]))])
        assert intent.kind is IntentKind.SCALE, intent
        return self._reshaped(topic, resharder.scale(topic, int(intent.args["virtual_partitions"])))

    def _reshaped(self, topic: str, done: list[Resharded]) -> dict:
        for step in done:
            self._counters.resharded(reshard_kind(len(step.epoch.parents), len(step.epoch.children)))
            self._unhosted(topic, step.unhosted)
        return {"epochs": [epoch_to_json(step.epoch) for step in done]}

    def _unhosted(self, topic: str, vps) -> None:
        if vps:
            self._on_unhosted({VirtualPartitionItem(topic, vp) for vp in vps})

