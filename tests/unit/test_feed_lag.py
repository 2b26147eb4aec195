"""``FeedLag``: a feed stream's lag behind its physical partition's high watermark, in messages and in time."""

from __future__ import annotations

from mafka4.virtual.feed_lag import FeedLag


def test_no_position_or_no_answer_yet_is_no_lag_figure():
    lag = FeedLag()
    assert lag.lag_messages(None) is None and lag.lag_ms(None, 1_000) is None
    assert lag.lag_messages(0) is None, "no HW seen yet"
    assert lag.lag_ms(0, 1_000) == 0, "nothing committed is known to be unfed"


def test_a_caught_up_stream_lags_nothing():
    lag = FeedLag()
    lag.observed(100, 1_000)
    lag.fed(100)
    assert (lag.lag_messages(100), lag.lag_ms(100, 5_000)) == (0, 0)


def test_the_age_of_the_oldest_unfed_message_dates_from_when_the_stream_first_saw_it_committed():
    lag = FeedLag()
    lag.observed(100, 1_000)  # offsets 0..99 committed by t=1000
    lag.observed(150, 2_000)  # 100..149 by t=2000
    lag.observed(150, 2_500)  # nothing new: the first sighting stands
    lag.observed(200, 3_000)
    lag.fed(60)
    assert (lag.lag_messages(60), lag.lag_ms(60, 4_000)) == (140, 3_000)
    lag.fed(100)
    assert (lag.lag_messages(100), lag.lag_ms(100, 4_000)) == (100, 2_000), "offset 100 was seen at t=2000"
    lag.fed(170)
    assert lag.lag_ms(170, 4_000) == 1_000
    lag.fed(200)
    assert lag.lag_ms(200, 4_000) == 0


def test_an_older_answer_from_a_follower_behind_the_last_source_moves_no_sighting_back():
    lag = FeedLag()
    lag.observed(100, 1_000)
    lag.observed(80, 2_000)
    assert lag.high_watermark == 80, "the messages figure follows the last answer"
    assert lag.lag_ms(50, 3_000) == 2_000, "offset 50 was seen committed at t=1000"


def test_past_its_bound_the_newest_sighting_is_overwritten_so_the_lag_is_never_overstated():
    lag = FeedLag(samples_max=2)
    lag.observed(100, 1_000)
    lag.observed(200, 2_000)
    lag.observed(300, 3_000)  # replaces (200, 2000): offsets 100..199 now date from t=3000
    lag.fed(100)
    assert lag.lag_ms(100, 4_000) == 1_000, "less than the true 2,000 ms, never more"
    lag.fed(0)
    assert lag.lag_ms(0, 4_000) == 1_000, "a stream that went back reads no older sighting than it kept"
