"""Leader-epoch history: assignment, Kafka's OffsetsForLeaderEpoch answer, checkpoints."""

import pytest

from mafka4.errors import CorruptRecord
from mafka4.log.epochs import EpochHistory


def test_empty_history_knows_no_epoch():
    history = EpochHistory()
    assert history.entries == ()
    assert history.latest_epoch == -1
    assert history.end_offset_for(0, 0) == (-1, -1)


def test_assign_appends_new_epochs_and_ignores_the_latest_again():
    history = EpochHistory()
    assert history.assign(0, 0)
    assert history.assign(2, 10)
    assert not history.assign(2, 15)  # the same leader appending more batches
    assert history.entries == ((0, 0), (2, 10))
    assert history.latest_epoch == 2


def test_an_epoch_without_batches_is_replaced_by_the_next_one_at_the_same_offset():
    history = EpochHistory([(0, 0), (1, 10)])
    history.assign(3, 10)
    assert history.entries == ((0, 0), (3, 10))


def test_assign_refuses_older_epochs_and_offsets():
    history = EpochHistory([(0, 0), (2, 10)])
    with pytest.raises(AssertionError):
        history.assign(1, 20)
    with pytest.raises(AssertionError):
        history.assign(3, 5)


@pytest.mark.parametrize(
    "epoch, expected",
    [
        (-1, (-1, -1)),
        (0, (0, 10)),  # ends where epoch 2 starts
        (1, (0, 10)),  # unknown epoch: the largest known epoch below it
        (2, (2, 25)),
        (3, (2, 25)),
        (5, (5, 40)),  # the latest epoch ends at the log end offset
        (9, (5, 40)),
    ],
)
def test_end_offset_for(epoch, expected):
    history = EpochHistory([(0, 0), (2, 10), (5, 25)])
    assert history.end_offset_for(epoch, log_end_offset=40) == expected


def test_end_offset_for_an_epoch_older_than_the_history_is_the_first_start_offset():
    # Kafka's answer: the asker's batches of that epoch are not here at all.
    history = EpochHistory([(3, 7), (4, 9)])
    assert history.end_offset_for(1, log_end_offset=12) == (1, 7)


def test_start_offset_of():
    history = EpochHistory([(0, 0), (2, 10)])
    assert history.start_offset_of(2) == 10
    assert history.start_offset_of(1) is None


def test_truncate_from_drops_epochs_starting_at_or_after_the_offset():
    history = EpochHistory([(0, 0), (2, 10), (5, 25)])
    history.truncate_from(25)
    assert history.entries == ((0, 0), (2, 10))
    history.truncate_from(11)
    assert history.entries == ((0, 0), (2, 10))
    history.truncate_from(0)
    assert history.entries == ()


def test_checkpoint_round_trip_uses_kafkas_format():
    history = EpochHistory([(0, 0), (3, 150)])
    text = history.to_text()
    assert text == "0\n2\n0 0\n3 150\n"
    assert EpochHistory.from_text(text) == history
    assert EpochHistory.from_text(EpochHistory().to_text()).entries == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n0\n",  # unknown version
        "0\n2\n0 0\n",  # fewer entries than announced
        "0\n1\n0 0\n1 5\n",  # more entries than announced
        "0\n1\nzero 0\n",
        "0\n1\n0 0 0\n",
        "0\n2\n3 10\n2 20\n",  # epochs not ascending
        "0\n2\n2 10\n3 10\n",  # start offsets not ascending
        "0\n1\n1 -5\n",
        "0\n-1\n",
    ],
)
def test_from_text_refuses_garbage_with_corrupt_record(text):
    with pytest.raises(CorruptRecord, match="leader-epoch checkpoint"):
        EpochHistory.from_text(text)
