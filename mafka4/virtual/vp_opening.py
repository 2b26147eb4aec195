"""``VpOpening``: a read node opens VP replicas' logs on its worker thread, never on its event loop.

Opening a replica (``HostedVp``) opens and recovers its log (``Log.open``: the directory
listed, the last segment scanned unless the log was closed cleanly, the checkpoints read):
about 0.4 ms for a split's new child here, and as long as reading its tail for a restarted
replica. On the event loop that time is taken from the fetches and the feed of every other
VP the node hosts, so ``open`` runs the opening on the worker thread (``asyncio.to_thread``,
as housekeeping runs the fsyncs, ``virtual.housekeeping``) and takes the opened replicas into
the node's VPs on the loop. Nothing else refers to a replica while it opens: it is the loop's
only once taken in.

One opening at a time (``lock``): an ``open`` of a VP that another is opening (the controller
announcing roles again) waits, then finds it hosted, so no directory is ever opened twice; the
node's ``drop`` and ``close`` take the lock too, so they never close or move aside a directory
while it opens. A replica that fails to open raises once the ones opened before it were taken
in, as opening them one by one on the loop did. A caller cancelled while the thread opens
still takes in what it opened (the replicas would hold their files otherwise, unseen).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # the types only: the replicas are made by the caller's ``make``
    from mafka4.virtual.hosted_vp import HostedVp, VpId


class VpOpening:
    def __init__(self, hosted: dict[VpId, HostedVp]):
        """``hosted``: the node's replicas by VP, which ``open`` adds to (on the loop)."""
        self.lock = asyncio.Lock()
        self._hosted = hosted

    async def open(self, vp_ids: Sequence[VpId], make: Callable[[VpId], HostedVp]) -> list[HostedVp]:
        """The hosted replica of each of ``vp_ids``, those not hosted yet made by ``make`` (which
        opens the replica's log) on the worker thread."""
        async with self.lock:
            missing = [vp_id for vp_id in dict.fromkeys(vp_ids) if vp_id not in self._hosted]
            if missing:
                opening = asyncio.ensure_future(asyncio.to_thread(_open_each, missing, make))
                try:
                    opened, error = await asyncio.shield(opening)
                except asyncio.CancelledError:
                    opened, error = await opening
                    self._take_in(opened)
                    raise
                self._take_in(opened)
                if error is not None:
                    raise error
        return [self._hosted[vp_id] for vp_id in vp_ids]

    def _take_in(self, opened: list[HostedVp]) -> None:
        for hosted in opened:
            assert hosted.vp_id not in self._hosted, f"{hosted.vp_id} opened twice"
            self._hosted[hosted.vp_id] = hosted


def _open_each(vp_ids: list[VpId], make: Callable[[VpId], HostedVp]) -> tuple[list[HostedVp], Exception | None]:
    """``make`` each in turn (on the worker thread): those opened, and the error that stopped it, if any."""
    opened = []
    for vp_id in vp_ids:
        try:
            opened.append(make(vp_id))
        except Exception as error:  # raised on the loop, once the replicas opened before it are taken in
            return opened, error
    return opened, None
