"""What the Kafka listener remembers of idempotent producers, and its decision on each batch:
a retry is answered, not appended; a gap, an old epoch, an unknown producer are told apart."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.kafka.producer_sessions import APPENDED, SEQUENCES, Decision, ProducerSessions, RememberedBatch

PID = 7_000_000_000_001


def produced(sessions: ProducerSessions, base_sequence: int, count: int, base_offset: int, epoch: int = 0,
             partition: int = 0, term: int = 0, pid: int = PID) -> Decision:
    """Admit a batch and, if it is to be appended, record it at ``base_offset``."""
    admission = sessions.admit(pid, epoch, "orders", partition, base_sequence, count, term=term)
    if admission.decision in APPENDED:
        sessions.recorded(pid, epoch, "orders", partition, base_sequence, count, base_offset, term=term)
    return admission.decision


def test_a_new_producer_starts_at_sequence_0_and_each_batch_follows_the_last():
    sessions = ProducerSessions(10)
    assert produced(sessions, 0, 3, 100) is Decision.NEW
    assert produced(sessions, 3, 2, 200) is Decision.NEW
    assert sessions.expected(PID, "orders", 0) == (0, 5)
    assert sessions.remembered(PID, "orders", 0) == (RememberedBatch(0, 3, 100), RememberedBatch(3, 2, 200))


def test_a_retry_of_one_of_the_last_five_batches_is_answered_its_first_offset_and_not_appended():
    sessions = ProducerSessions(10)
    for n in range(6):
        assert produced(sessions, n * 10, 10, 1000 + n) is Decision.NEW
    for n in range(1, 6):
        admission = sessions.admit(PID, 0, "orders", 0, n * 10, 10)
        assert (admission.decision, admission.base_offset) == (Decision.DUPLICATE, 1000 + n)
    oldest = sessions.admit(PID, 0, "orders", 0, 0, 10)
    assert oldest.decision is Decision.OUT_OF_ORDER and "expects sequence 60" in oldest.reason
    assert sessions.expected(PID, "orders", 0) == (0, 60), "a refused or answered batch changes nothing"


def test_a_batch_with_the_same_start_and_another_count_is_not_a_retry():
    sessions = ProducerSessions(10)
    produced(sessions, 0, 5, 100)
    assert sessions.admit(PID, 0, "orders", 0, 0, 4).decision is Decision.OUT_OF_ORDER


def test_a_gap_is_out_of_order_and_the_missing_batch_is_still_taken():
    sessions = ProducerSessions(10)
    produced(sessions, 0, 5, 100)
    gap = sessions.admit(PID, 0, "orders", 0, 10, 5)
    assert gap.decision is Decision.OUT_OF_ORDER and "expects sequence 5" in gap.reason
    assert produced(sessions, 5, 5, 200) is Decision.NEW
    assert produced(sessions, 10, 5, 300) is Decision.NEW


def test_an_older_epoch_is_fenced_and_a_newer_one_starts_over_at_sequence_0():
    sessions = ProducerSessions(10)
    produced(sessions, 0, 5, 100, epoch=3)
    fenced = sessions.admit(PID, 2, "orders", 0, 5, 5)
    assert fenced.decision is Decision.FENCED and "epoch 3" in fenced.reason
    assert sessions.admit(PID, 4, "orders", 0, 5, 5).decision is Decision.OUT_OF_ORDER, "a new epoch starts at 0"
    assert produced(sessions, 0, 5, 200, epoch=4) is Decision.NEW
    assert sessions.remembered(PID, "orders", 0) == (RememberedBatch(0, 5, 200),)
    assert sessions.admit(PID, 3, "orders", 0, 5, 5).decision is Decision.FENCED


def test_a_bump_forgets_the_old_epochs_sequences_on_every_partition_and_fences_its_batches():
    sessions = ProducerSessions(10)
    produced(sessions, 0, 5, 100, partition=0)
    produced(sessions, 0, 7, 100, partition=1)
    sessions.bump(PID, 1)
    for partition in (0, 1):
        assert sessions.expected(PID, "orders", partition) == (1, 0)
        assert sessions.admit(PID, 0, "orders", partition, 0, 5).decision is Decision.FENCED
    assert produced(sessions, 0, 2, 300, epoch=1, partition=1) is Decision.NEW


def test_a_batch_appended_while_its_producer_bumped_the_epoch_is_not_remembered():
    sessions = ProducerSessions(10)
    assert sessions.admit(PID, 0, "orders", 0, 0, 5).decision is Decision.NEW
    sessions.bump(PID, 1)
    sessions.recorded(PID, 0, "orders", 0, 0, 5, 100)
    assert sessions.expected(PID, "orders", 0) == (1, 0)


def test_an_unknown_producer_past_sequence_0_is_appended_and_followed_from_there():
    sessions = ProducerSessions(10)
    admission = sessions.admit(PID, 0, "orders", 0, 500, 5)
    assert admission.decision is Decision.UNKNOWN and "sequence 500" in admission.reason
    assert admission.decision in APPENDED
    sessions.recorded(PID, 0, "orders", 0, 500, 5, 100)
    assert sessions.admit(PID, 0, "orders", 0, 500, 5).decision is Decision.DUPLICATE
    assert produced(sessions, 505, 1, 200) is Decision.NEW


def test_batches_behind_a_failed_append_wait_for_it_instead_of_passing_it():
    """The entry is made on admission: a first batch whose append failed holds the place."""
    sessions = ProducerSessions(10)
    assert sessions.admit(PID, 0, "orders", 0, 0, 5).decision is Decision.NEW  # its append fails
    assert sessions.admit(PID, 0, "orders", 0, 5, 5).decision is Decision.OUT_OF_ORDER
    assert produced(sessions, 0, 5, 100) is Decision.NEW  # the resend
    assert produced(sessions, 5, 5, 200) is Decision.NEW


def test_sequences_wrap_after_2_to_the_31_minus_1():
    sessions = ProducerSessions(10)
    last = SEQUENCES - 1
    sessions.admit(PID, 0, "orders", 0, last - 2, 1)
    sessions.recorded(PID, 0, "orders", 0, last - 2, 1, 10)
    assert produced(sessions, last - 1, 3, 20) is Decision.NEW  # sequences 2**31-2, 2**31-1, 0
    assert sessions.expected(PID, "orders", 0) == (0, 1)
    assert produced(sessions, 1, 4, 30) is Decision.NEW
    assert sessions.admit(PID, 0, "orders", 0, last - 1, 3).base_offset == 20


def test_an_entry_of_an_earlier_term_is_dropped_the_producer_is_unknown_not_out_of_order():
    """Led elsewhere in between, the producer went on there: its next batch is not a gap here."""
    sessions = ProducerSessions(10)
    produced(sessions, 0, 100, 10, term=4)
    assert produced(sessions, 200, 5, 20, term=6) is Decision.UNKNOWN
    assert sessions.expected(PID, "orders", 0) == (0, 205)
    assert produced(sessions, 0, 5, 30, term=8) is Decision.NEW


def test_past_the_bound_the_least_recently_used_entry_is_forgotten():
    sessions = ProducerSessions(2)
    produced(sessions, 0, 1, 10, pid=1)
    produced(sessions, 0, 1, 10, pid=2)
    assert sessions.admit(1, 0, "orders", 0, 1, 1).decision is Decision.NEW  # 1 used again, 2 is the oldest
    produced(sessions, 0, 1, 10, pid=3)
    assert len(sessions) == 2
    assert sessions.expected(2, "orders", 0) is None
    assert sessions.expected(1, "orders", 0) is not None and sessions.expected(3, "orders", 0) is not None
    sessions.bump(2, 1)  # a forgotten producer's bump finds nothing to forget
    assert len(sessions) == 2


def test_an_entry_forgotten_during_its_append_is_remembered_from_the_appended_batch():
    sessions = ProducerSessions(1)
    assert sessions.admit(1, 0, "orders", 0, 7, 3).decision is Decision.UNKNOWN
    assert sessions.admit(2, 0, "orders", 0, 0, 1).decision is Decision.NEW  # forgets producer 1
    sessions.recorded(1, 0, "orders", 0, 7, 3, 50)
    assert sessions.remembered(1, "orders", 0) == (RememberedBatch(7, 3, 50),)


# --- properties ------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(start=st.sampled_from([0, 5, SEQUENCES - 40]), counts=st.lists(st.integers(1, 20), min_size=1, max_size=30),
       retries=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 8)), max_size=40))
def test_every_batch_is_appended_once_however_often_it_is_retried(start, counts, retries):
    """A producer sends its batches in order; after each, retries of earlier ones arrive: those
    among its last 5 are answered their offset, older ones are refused, none is appended again."""
    sessions = ProducerSessions(10)
    log: list[int] = []  # the base sequence of each appended batch, in append order
    sent: list[tuple[int, int, int]] = []  # (base sequence, count, base offset)
    sequence = start
    if start:
        assert sessions.admit(PID, 0, "orders", 0, start, 1).decision is Decision.UNKNOWN
        sessions.recorded(PID, 0, "orders", 0, start, 1, 0)
        sequence = (start + 1) % SEQUENCES
        log.append(start)
        sent.append((start, 1, 0))
    retries_after = {}
    for after, back in retries:
        retries_after.setdefault(after, []).append(back)
    for n, count in enumerate(counts):
        offset = len(log)
        assert produced(sessions, sequence, count, offset) is Decision.NEW
        log.append(sequence)
        sent.append((sequence, count, offset))
        sequence = (sequence + count) % SEQUENCES
        for back in retries_after.get(n, ()):
            if back >= len(sent):
                continue
            base_sequence, batch_count, base_offset = sent[-1 - back]
            admission = sessions.admit(PID, 0, "orders", 0, base_sequence, batch_count)
            if back < 5:
                assert (admission.decision, admission.base_offset) == (Decision.DUPLICATE, base_offset)
            else:
                assert admission.decision is Decision.OUT_OF_ORDER
    assert log == [batch[0] for batch in sent], "each batch appended once, in order"
    assert sessions.expected(PID, "orders", 0) == (0, sequence)


_operation = st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 1), st.integers(0, 12),
                       st.integers(1, 4), st.integers(0, 1), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(operations=st.lists(_operation, max_size=80), bound=st.integers(1, 6))
def test_any_sequence_of_batches_keeps_the_invariants_and_the_bound(operations, bound):
    """Admissions, appends that fail, bumps and term changes in any order: the core's assertions
    hold, the bound holds, and a batch just recorded is a duplicate when sent again."""
    sessions = ProducerSessions(bound)
    for pid, epoch, partition, base_sequence, count, term, appended, bump in operations:
        if bump:
            sessions.bump(pid, epoch)
            continue
        admission = sessions.admit(pid, epoch, "orders", partition, base_sequence, count, term=term)
        assert len(sessions) <= bound
        if admission.decision in APPENDED and appended:
            sessions.recorded(pid, epoch, "orders", partition, base_sequence, count, 1000, term=term)
            again = sessions.admit(pid, epoch, "orders", partition, base_sequence, count, term=term)
            assert (again.decision, again.base_offset) == (Decision.DUPLICATE, 1000)
        elif admission.decision in APPENDED:
            assert sessions.expected(pid, "orders", partition)[1] == base_sequence
