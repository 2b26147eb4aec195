"""A client connection's session rules (``mafka4.protocol.session``): what may be asked in each state. Pure."""

from __future__ import annotations

import pytest

from mafka4.errors import AuthenticationFailed, NotAuthenticated
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.session import ANONYMOUS, AuthState, Session, SessionMachine

PEER = "127.0.0.1:50000"
DATA_API = 4  # any API beyond the connection's own (PRODUCE's number, reserved)
OFFERED = ("SCRAM-SHA-256",)


def _allowed(machine: SessionMachine) -> set[int]:
    return {api for api in (*ApiKey, DATA_API) if machine.refusal(api) is None}


def test_a_connection_may_only_learn_versions_and_start_the_handshake_until_it_authenticates():
    machine = SessionMachine(PEER, authenticating=True)
    assert machine.state is AuthState.AWAITING_AUTH and machine.principal is None
    assert _allowed(machine) == {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}
    refusal = machine.refusal(DATA_API)
    assert isinstance(refusal, NotAuthenticated)
    assert str(refusal) == (f"{PEER} asked for PRODUCE before authenticating: a connection starts with SASL_HANDSHAKE "
                            f"and SASL_AUTHENTICATE (open it with a credential)")
    assert machine.state is AuthState.AWAITING_AUTH, "a refusal changes nothing"


def test_the_exchange_steps_alone_run_between_handshake_and_success_then_everything_but_the_handshake():
    machine = SessionMachine(PEER, authenticating=True)
    assert machine.handshake("SCRAM-SHA-256", OFFERED) is None
    assert machine.state is AuthState.AUTHENTICATING and machine.mechanism == "SCRAM-SHA-256"
    assert _allowed(machine) == {ApiKey.SASL_AUTHENTICATE}
    assert "in the middle of its SCRAM-SHA-256 exchange" in str(machine.refusal(ApiKey.API_VERSIONS))
    machine.authenticated("alice")
    assert machine.state is AuthState.AUTHENTICATED
    assert _allowed(machine) == set(ApiKey) - {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} | {DATA_API}
    assert "authenticated already (as 'alice')" in str(machine.refusal(ApiKey.SASL_HANDSHAKE))
    assert machine.session() == Session("alice", PEER)


def test_a_mechanism_not_offered_fails_the_connection_and_a_failed_one_may_ask_nothing():
    machine = SessionMachine(PEER, authenticating=True)
    failure = machine.handshake("PLAIN", OFFERED)
    assert isinstance(failure, AuthenticationFailed) and "offers ['SCRAM-SHA-256']" in str(failure)
    assert machine.state is AuthState.FAILED and _allowed(machine) == set()
    other = SessionMachine(PEER, authenticating=True)
    other.handshake("SCRAM-SHA-256", OFFERED)
    other.failed()
    assert _allowed(other) == set() and "open a new connection" in str(other.refusal(ApiKey.API_VERSIONS))


def test_without_authentication_a_connection_starts_authenticated_as_anonymous():
    machine = SessionMachine(PEER, authenticating=False)
    assert machine.state is AuthState.AUTHENTICATED and machine.session() == Session(ANONYMOUS, PEER)
    assert _allowed(machine) == set(ApiKey) - {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} | {DATA_API}


def test_a_transition_out_of_turn_is_a_broken_invariant():
    machine = SessionMachine(PEER, authenticating=True)
    with pytest.raises(AssertionError):
        machine.authenticated("alice")
    with pytest.raises(AssertionError):
        machine.session()
