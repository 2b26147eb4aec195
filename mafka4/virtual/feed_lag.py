"""``FeedLag``: how far a feed stream is behind its physical partition, in messages and in time.

A feed stream (``virtual.partition_feed``) learns the partition's high watermark (HW) with every
fetch answer, and stands at ``next_offset``, the first offset it has not fed. Its lag:

* in messages: the last HW it saw minus ``next_offset`` (physical offsets count messages);
* in time: the age of the oldest committed record not fed yet (the one at ``next_offset``),
  measured from when the stream first saw an HW past it. The stream remembers, for each HW it saw
  grow, when it first saw it: the record at ``next_offset`` was committed by the time of the first
  remembered HW above it. 0 when nothing committed is unfed.

Why from what the stream saw, not from the records' timestamps: the records not fed yet are the
ones the stream has not fetched, so their timestamps are unknown to it. A stream long-polls its
source for the HW, so it sees a new HW within one fetch of it; the age is therefore that of the
record's commit, less at most one round. It is never more than the truth: a record becomes
committed before any stream sees it. Cases where it reads less than the truth: a backlog the
stream found when it started (its age counts from the stream's first fetch), a stream that went
back (a resume) below what it had already fed, and more distinct HWs unfed than
``FEED_LAG_SAMPLES_MAX`` (the newest pair is overwritten, so its offsets date from the later time).

Pure: the shell passes ``now_ms`` (wall clock, as every record timestamp here).
"""

from __future__ import annotations

from collections import deque

from mafka4.limits import FEED_LAG_SAMPLES_MAX


class FeedLag:
    """The lag of one feed stream; see the module docstring."""

    __slots__ = ("_samples", "_samples_max", "high_watermark")

    def __init__(self, samples_max: int = FEED_LAG_SAMPLES_MAX):
        assert samples_max >= 1, samples_max
        self._samples: deque[tuple[int, int]] = deque()  # (HW, wall ms first seen), HWs increasing
        self._samples_max = samples_max
        self.high_watermark: int | None = None  # the last HW seen; None before the first fetch answer

    def observed(self, high_watermark: int, now_ms: int) -> None:
        """A fetch answer said the partition's HW is ``high_watermark`` (at ``now_ms``)."""
        self.high_watermark = high_watermark
        samples = self._samples
        if samples and high_watermark <= samples[-1][0]:
            return  # nothing committed since (or an older answer, from a follower behind the last source)
        if len(samples) == self._samples_max:
            samples.pop()  # see the module docstring: the newer time can only understate the lag
        samples.append((high_watermark, now_ms))

    def fed(self, next_offset: int) -> None:
        """The stream now stands at ``next_offset``: forget the HWs it fed up to."""
        samples = self._samples
        while samples and samples[0][0] <= next_offset:
            samples.popleft()

    def lag_messages(self, next_offset: int | None) -> int | None:
        """Committed messages not fed yet; None while the stream has no position or saw no HW."""
        if next_offset is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - next_offset)

    def lag_ms(self, next_offset: int | None, now_ms: int) -> int | None:
        """The age of the oldest committed record not fed yet (0: none); None while the stream has
        no position."""
        if next_offset is None:
            return None
        for high_watermark, seen_ms in self._samples:
            if high_watermark > next_offset:
                return max(0, now_ms - seen_ms)
        return 0
