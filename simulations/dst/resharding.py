"""Resharding and sealing, run by the coordinator: the shell around ``virtual/layout.py``.

The real cores decide (``TopicLayout.plan_split`` / ``plan_merge``, ``is_sealed``); this
module is the protocol around them that the production shells do not have yet, built as
``layout.py``'s docstring asks: "the shell must stop the feeder of p from passing the
proposed cut[p] under the old epoch until the new epoch is stored".

Two sources of reshards, one at a time (a request while one is pending is refused; in
production the controller's intent worker carries them out one after the other):

* the group: a member whose ``plan_ownership`` names a split sends a ``SplitRequest``
  (``Resharder.split`` in production), answered ``SplitResult`` once the epoch is stored or
  the reshard abandoned, at once when refused (another reshard pending, or ``plan_split``
  refuses the VP: closed, or the layout at ``virtual_partitions_max``);
* random ones, at most ``reshards_max`` per run during the chaos phase: a split of any
  active VP or a merge of two neighbours, within one lane (the trunk or an open lane). They
  stay because the group never merges and splits only readable VPs of a group larger than the
  layout: random ones also merge, split children whose parents are still being read (chains
  of closed parents) and reshard while nobody reads the VP.

1. Start: record a pending reshard id with its parents (metadata shows both to the
   feeders); each feeder answers ``PauseAck`` with its ``fed_through`` after a round and
   from then on holds back the parents' records at or past it, feeding the other VPs on
   (``Feeder.hold``).
2. Once every partition answered: cut[p] = fed_through[p] plus a random slack (0 to 3
   offsets: a cut above what was fed is legal, the parents then get the records below it;
   none while a lane of the workload is still to open: a lane opens at the current cut, which
   must not lie above a partition's log end, as no cut production offers does),
   plan the chosen split or merge, append the epoch, open the children
   (``Coordinator.open_vp``) and clear the pending id in the same step, so the metadata the
   feeders read next holds the new layout. A reshard whose acks do not all come within
   ``PAUSE_TIMEOUT_MS`` is abandoned (the pending id is cleared, nothing changes), and so is a
   split that a lane opened meanwhile left no room for (``InvalidReshard``). Splits keep one VP
   of room for each lane of the workload not open yet (``_room``), so a lane always opens.
3. Sealing: for each closed, unsealed VP, its leader is asked (``VpSealQuery``) what every
   feeder reported as fed to it; when ``is_sealed`` holds and its high watermark reached its
   log end, that log end is its sealed end offset (children become readable by the group
   once the parent is consumed to it).
"""

from __future__ import annotations

from mafka4.errors import InvalidReshard, MafkaError
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME
from simulations.dst.env import Env

PAUSE_TIMEOUT_MS = 400


class ReshardAdmin:
    def __init__(self, env: Env, coordinator):
        self.env = env
        self.coordinator = coordinator
        self._pending_since_ms = 0
        self._acks: dict[int, int] = {}
        self._fenced: dict[int, int] = {}  # partition -> the feeder incarnation acks must come from, at least
        self._reshard_ids = 0
        self._chosen: tuple[int, ...] = ()  # the pending reshard's parents: one VP to split, or two to merge
        self._requester: tuple[str, int] | None = None  # the member that asked for the pending split, its request
        self._random_reshards = 0  # stored ones
        self._split_requests: set[int] = set()  # request ids handled: a copy the network duplicated is ignored
        self.reshards_total = 0
        self.abandoned_total = 0
        self._next_reshard_ms = self._draw_next()
        self._seal_queries: dict[int, int] = {}  # request id -> vp

    def _draw_next(self) -> int:
        return self.env.now_ms + self.env.rng.randint(100, max(200, self.env.options.chaos_ms // 2))

    def step(self) -> None:
        coordinator = self.coordinator
        now_ms = self.env.now_ms
        if coordinator.reshard_pending is not None:
            if len(self._acks) == self.env.options.partitions:
                self._reshard()
            elif now_ms - self._pending_since_ms >= PAUSE_TIMEOUT_MS:
                self.env.note(f"reshard {coordinator.reshard_pending} abandoned: feeders {sorted(self._acks)} paused")
                coordinator.reshard_pending, coordinator.reshard_parents = None, ()
                self.abandoned_total += 1
                self._answer_requester(False)
        elif (self._random_reshards < self.env.options.reshards_max and now_ms >= self._next_reshard_ms
              and now_ms < self.env.options.chaos_ms):
            self._begin(self._choose(coordinator.layout), None)
        self._query_seals()

    def _begin(self, parents: tuple[int, ...], requester: tuple[str, int] | None) -> None:
        coordinator = self.coordinator
        self._reshard_ids += 1
        self._chosen, self._requester = parents, requester
        coordinator.reshard_pending, coordinator.reshard_parents = self._reshard_ids, parents
        self._pending_since_ms = self.env.now_ms
        self._acks = {}

    def _on_split_request(self, source: str, message: m.SplitRequest) -> None:
        if message.request_id in self._split_requests:
            return
        self._split_requests.add(message.request_id)
        layout = self.coordinator.layout
        refused = None
        if self.coordinator.reshard_pending is not None:
            refused = "another reshard is pending"
        else:
            try:  # refuse what the plan would refuse before any feeder holds back, as the Resharder does
                layout.plan_split(message.vp, layout.current.cut, layout.current.cut)
            except MafkaError as error:
                refused = str(error)
            if refused is None and self._room(layout) < 1:
                refused = "the room left is for the lanes still to open"
        if refused is not None:
            self.env.network.send(NAME, source, m.SplitResult(message.request_id, False))
            return
        self.env.note(f"reshard: {source} asks for a split of vp{message.vp}")
        self._begin((message.vp,), (source, message.request_id))

    def _answer_requester(self, done: bool) -> None:
        if self._requester is not None:
            source, request_id = self._requester
            self.env.network.send(NAME, source, m.SplitResult(request_id, done))
            if done:
                self.env.count("ownership_splits")
            self._requester = None

    def _choose(self, layout) -> tuple[int, ...]:
        """The parents of the next reshard: two neighbours of one lane to merge, or one VP to split."""
        rng = self.env.rng
        current = layout.current
        lanes = [current.lane_ranges(lane_id) for lane_id in range(len(current.lanes) + 1)]
        full = self._room(layout) < 1
        if full:  # only a merge fits: a lane with two VPs or more (there is one, see ``_room``)
            lanes = [ranges for ranges in lanes if len(ranges.vp_ids) > 1]
        ranges = lanes[0] if len(lanes) == 1 else lanes[rng.randrange(len(lanes))]
        active = list(ranges.vp_ids)  # in hash order: neighbours are adjacent
        if len(active) > 1 and (full or rng.random() < 0.4):
            index = rng.randrange(len(active) - 1)
            return active[index], active[index + 1]
        return (rng.choice(active),)

    def _room(self, layout) -> int:
        """How many more VPs splits may open: ``virtual_partitions_max`` less the active VPs and one VP for
        each lane of the workload not open yet (its producers wait for it to open)."""
        return layout.config.virtual_partitions_max - len(layout.current.vp_ids) - self._lanes_to_open(layout)

    def _lanes_to_open(self, layout) -> int:
        """How many lanes of the workload are not open yet."""
        return sum(1 for name, _ in self.env.options.lanes if layout.current.lane_id(name) is None)

    def _reshard(self) -> None:
        coordinator, rng = self.coordinator, self.env.rng
        layout = coordinator.layout
        fed_through = [self._acks[p] for p in range(self.env.options.partitions)]
        # A cut above what was fed is legal; but a lane opens at the current cut (``plan_open_lane``) and its
        # records, produced from the log end on, must not lie below it: no slack while a lane is still to open.
        slack = not self._lanes_to_open(layout)
        cut = [max(fed, old) + (rng.choice((0, 0, 1, 3)) if slack else 0)
               for fed, old in zip(fed_through, layout.current.cut)]
        try:
            if len(self._chosen) == 2:
                epoch = layout.plan_merge(*self._chosen, cut, fed_through)
            else:
                epoch = layout.plan_split(self._chosen[0], cut, fed_through)
        except InvalidReshard as error:  # a lane opened meanwhile took the room the split needed
            self.env.note(f"reshard {coordinator.reshard_pending} abandoned: {error}")
            coordinator.reshard_pending, coordinator.reshard_parents = None, ()
            self.abandoned_total += 1
            if self._requester is None:
                self._next_reshard_ms = self._draw_next()
            self._answer_requester(False)
            return
        coordinator.layout = layout.append(epoch)
        for vp in epoch.children:
            coordinator.open_vp(vp, epoch.range_of(vp))
        coordinator.reshard_pending, coordinator.reshard_parents = None, ()
        self.reshards_total += 1
        if self._requester is None:
            self._random_reshards += 1
            self._next_reshard_ms = self._draw_next()
        self._answer_requester(True)
        self.env.note(f"reshard: split epoch {epoch.epoch}: {list(epoch.parents)} -> {list(epoch.children)} "
                      f"cut {list(epoch.cut)} (fed through {fed_through})")

    def _query_seals(self) -> None:
        coordinator = self.coordinator
        for vp, state in sorted(coordinator.vps.items()):
            if vp in coordinator.sealed_end_offsets or coordinator.layout.closing_epoch(vp) is None:
                continue
            request_id = self.env.request_id()
            self._seal_queries[request_id] = vp
            self.env.network.send(NAME, state.leader, m.VpSealQuery(request_id, vp, state.leader_epoch))

    def fence(self, partition: int, incarnation: int) -> None:
        """A feeder of ``partition`` resumes without holding back: its earlier acknowledgement no longer holds."""
        self._acks.pop(partition, None)
        self._fenced[partition] = max(self._fenced.get(partition, 0), incarnation)

    def handle(self, source: str, message: object) -> None:
        coordinator = self.coordinator
        if isinstance(message, m.SplitRequest):
            self._on_split_request(source, message)
            return
        if isinstance(message, m.PauseAck):
            if (message.reshard_id == coordinator.reshard_pending
                    and message.incarnation >= self._fenced.get(message.partition, 0)):
                self._acks[message.partition] = message.fed_through
            return
        assert isinstance(message, m.VpSealAnswer), message
        vp = self._seal_queries.pop(message.request_id, None)
        if vp is None or message.failure is not None or vp in coordinator.sealed_end_offsets:
            return
        fed = dict(message.fed_through)
        fed_through = [fed.get(p, 0) for p in range(self.env.options.partitions)]
        if coordinator.layout.is_sealed(vp, fed_through) and message.high_watermark == message.log_end_offset:
            coordinator.sealed_end_offsets[vp] = message.log_end_offset
            self.env.note(f"vp{vp} sealed at {message.log_end_offset}")
