"""SCRAM-SHA-256 between ``ScramClientExchange`` and ``ScramServerExchange``, no network.

What a user relies on: the right password authenticates and names the principal; a wrong
password and an unknown user fail alike (nobody learns which users exist); whatever bytes a
client sends, in whatever order, the server raises ``AuthenticationFailed`` and nothing else; a
server that does not hold the credential cannot pass itself off to the client; etcd's value never
holds the password.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.errors import AuthenticationFailed, CoordinatorUnavailable, InvalidConfig
from mafka4.limits import (
    SCRAM_ITERATIONS_DEFAULT,
    SCRAM_ITERATIONS_MAX,
    SCRAM_MESSAGE_BYTES_MAX,
)
from mafka4.security.credentials import StoredCredential, make_credential
from mafka4.security.scram import ScramServerExchange
from mafka4.security.scram_client import MECHANISM, PasswordKeys, ScramClientExchange, saslprep

PASSWORD = "correct horse battery"
USERS = {"bob": make_credential(PASSWORD)}


def authenticate(user: str, password: str, users=USERS, server: ScramServerExchange | None = None) -> str | None:
    """One whole exchange; returns the server's principal."""
    server = server or ScramServerExchange(users.get)
    client = ScramClientExchange(user, password)
    server_final = server.step(client.respond(server.step(client.first())))
    client.finish(server_final)
    return server.principal


def test_the_right_password_authenticates_and_names_the_principal():
    server = ScramServerExchange(USERS.get)
    assert server.principal is None
    assert authenticate("bob", PASSWORD, server=server) == "bob"
    assert ScramClientExchange.mechanism == MECHANISM == "SCRAM-SHA-256"


def test_a_wrong_password_and_an_unknown_user_fail_alike():
    messages = []
    for users in (USERS, {}):  # bob with a wrong password, then bob unknown
        server = ScramServerExchange(users.get)
        with pytest.raises(AuthenticationFailed) as failed:
            authenticate("bob", "not the password", users, server)
        assert server.principal is None
        messages.append(failed.value.message)
    assert messages[0] == messages[1]
    assert "'bob'" in messages[0] and "wrong password or unknown user" in messages[0]
    assert not AuthenticationFailed.retriable


def test_an_unknown_user_gets_a_stable_salt_like_a_known_one():
    """The server-first of an unknown user looks like a known user's, and repeats, so a client
    cannot tell the two apart by asking twice."""

    def salt_of(user: str, users) -> tuple[str, str]:
        first = ScramServerExchange(users.get).step(ScramClientExchange(user, PASSWORD).first()).decode()
        fields = dict(part.split("=", 1) for part in first.split(","))
        return fields["s"], fields["i"]

    unknown = salt_of("alice", USERS)
    assert unknown == salt_of("alice", USERS)
    assert unknown != salt_of("carol", USERS)
    assert unknown[1] == salt_of("bob", USERS)[1] == str(SCRAM_ITERATIONS_DEFAULT)
    assert len(base64.b64decode(unknown[0])) == len(USERS["bob"].salt)
    shared = b"k" * 32
    first = [ScramServerExchange({}.get, mock_key=shared).step(ScramClientExchange("alice", PASSWORD).first())
             for _ in range(2)]
    assert first[0].split(b",")[1] == first[1].split(b",")[1], "a shared mock key gives the same salt everywhere"


def test_a_lookup_failure_passes_through_and_an_invalid_name_is_never_looked_up():
    looked_up = []

    def lookup(user):
        looked_up.append(user)
        raise CoordinatorUnavailable("etcd did not answer; retry")

    with pytest.raises(CoordinatorUnavailable):
        ScramServerExchange(lookup).step(ScramClientExchange("bob", PASSWORD).first())
    server = ScramServerExchange(lookup)
    server.step(b"n,,n=../../topics/x,r=abcdefgh")
    assert looked_up == ["bob"]


def test_a_tampered_client_final_fails():
    server = ScramServerExchange(USERS.get)
    client = ScramClientExchange("bob", PASSWORD)
    final = client.respond(server.step(client.first()))
    without_proof, proof = final.rsplit(b",p=", 1)
    flipped = bytearray(base64.b64decode(proof))
    flipped[0] ^= 1
    with pytest.raises(AuthenticationFailed, match="wrong password or unknown user"):
        server.step(without_proof + b",p=" + base64.b64encode(bytes(flipped)))
    assert server.principal is None


def test_steps_out_of_order_and_a_third_step_fail():
    client = ScramClientExchange("bob", PASSWORD)
    first = client.first()
    server = ScramServerExchange(USERS.get)
    with pytest.raises(AuthenticationFailed):
        server.step(b"c=biws,r=abc,p=AAAA")  # a client-final first
    with pytest.raises(AuthenticationFailed, match="is over"):
        server.step(first)  # a failed exchange stays failed

    server = ScramServerExchange(USERS.get)
    server_first = server.step(first)
    with pytest.raises(AuthenticationFailed):
        server.step(first)  # client-first again
    with pytest.raises(AuthenticationFailed):
        ScramClientExchange("bob", PASSWORD).respond(server_first)  # a client that never started

    server = ScramServerExchange(USERS.get)
    assert authenticate("bob", PASSWORD, server=server) == "bob"
    with pytest.raises(AuthenticationFailed, match="is over"):
        server.step(first)


def test_a_message_too_long_or_not_text_fails_before_it_is_parsed():
    for message in (b"n,,n=bob,r=" + b"a" * SCRAM_MESSAGE_BYTES_MAX, b"n,,n=b\xffob,r=abc", "n,,n=bob,r=abc"):
        with pytest.raises(AuthenticationFailed):
            ScramServerExchange(USERS.get).step(message)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200) | st.sampled_from([b"n,,n=bob,r=abc", b"c=biws,r=abc,p=AAAA", b"n,,",
                                                             b"y,,n=bob,r=x", b"p=tls-unique,,n=bob,r=x",
                                                             b"n,,n=bob,r=abc,m=ext", b"n,a=bob,n=bob,r=x"]),
                min_size=1, max_size=4))
def test_any_bytes_in_any_order_raise_only_authentication_failed(messages):
    server = ScramServerExchange(USERS.get)
    for message in messages:
        try:
            server.step(message)
        except AuthenticationFailed:
            pass
    assert server.principal is None


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_mangled_client_final_raises_only_authentication_failed(data):
    """Edits of a real client-final reach the parser's inner checks (nonce, binding, proof),
    which random bytes seldom do."""
    server = ScramServerExchange(USERS.get)
    client = ScramClientExchange("bob", PASSWORD)
    final = bytearray(client.respond(server.step(client.first())))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(final)))
        cut = data.draw(st.integers(0, 3))
        final[at:at + cut] = data.draw(st.binary(max_size=4) | st.sampled_from([b",", b"=", b"p=", b",m=x", b"\0"]))
    try:
        server.step(bytes(final))
    except AuthenticationFailed:
        assert server.principal is None


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_a_client_given_any_bytes_raises_only_authentication_failed(server_first, server_final):
    client = ScramClientExchange("bob", PASSWORD)
    client.first()
    with pytest.raises(AuthenticationFailed):
        client.respond(server_first)
        client.finish(server_final)


def test_a_server_without_the_credential_is_caught_by_the_client():
    """A server holding another credential for bob (an impostor who learned a StoredKey, say, but
    not the ServerKey) cannot produce the server signature."""
    real, impostor_keys = USERS["bob"], make_credential("something else entirely")
    impostor = StoredCredential(real.salt, real.stored_key, impostor_keys.server_key, real.iterations)
    # The impostor's server accepts the proof (it has the StoredKey) but signs with the wrong key.
    server = ScramServerExchange({"bob": impostor}.get)
    client = ScramClientExchange("bob", PASSWORD)
    server_final = server.step(client.respond(server.step(client.first())))
    with pytest.raises(AuthenticationFailed, match="did not prove"):
        client.finish(server_final)


def test_a_client_refuses_a_server_asking_for_too_many_iterations():
    client = ScramClientExchange("bob", PASSWORD)
    server_first = ScramServerExchange(USERS.get).step(client.first()).replace(
        f"i={SCRAM_ITERATIONS_DEFAULT}".encode(), f"i={SCRAM_ITERATIONS_MAX + 1}".encode())
    with pytest.raises(AuthenticationFailed, match="iterations"):
        client.respond(server_first)


def test_the_stored_credential_round_trips_and_never_holds_the_password():
    credential = make_credential(PASSWORD)
    value = credential.to_json()
    assert StoredCredential.from_json(json.loads(json.dumps(value))) == credential
    text = json.dumps(value)
    assert PASSWORD not in text and base64.b64encode(PASSWORD.encode()).decode() not in text
    assert make_credential(PASSWORD).salt != credential.salt, "each credential has its own salt"


@pytest.mark.parametrize("field, bad", [
    ("salt", "not base64!"), ("salt", base64.b64encode(b"short").decode()), ("stored_key", 12),
    ("server_key", base64.b64encode(b"x" * 31).decode()), ("iterations", 4095), ("iterations", "4096"),
    ("iterations", True), ("iterations", SCRAM_ITERATIONS_MAX + 1),
])
def test_a_bad_stored_credential_field_is_named(field, bad):
    value = make_credential(PASSWORD).to_json()
    value[field] = bad
    with pytest.raises(InvalidConfig, match=field):
        StoredCredential.from_json(value)


def test_a_stored_credential_with_missing_or_extra_fields_is_refused():
    value = make_credential(PASSWORD).to_json()
    for bad in ({**value, "password": PASSWORD}, {k: v for k, v in value.items() if k != "salt"}, [value]):
        with pytest.raises(InvalidConfig, match="exactly the fields"):
            StoredCredential.from_json(bad)
    with pytest.raises(InvalidConfig, match="iterations"):
        make_credential(PASSWORD, iterations=100)
    with pytest.raises(InvalidConfig, match="user name"):
        ScramClientExchange("bob,admin", PASSWORD)


# The client's side is our own (``scram_client``, standard library only); the server's is scramp's.
# These pin that the two agree on every path a user can meet.

@pytest.mark.parametrize("stored, typed", [
    ("pässwörd with umlauts", "pässwörd with umlauts"),
    ("пароль для боба", "пароль для боба"),
    ("שלום עולם", "שלום עולם"),  # right-to-left throughout
    ("ｐａｓｓｗｏｒｄ１２", "password12"),  # NFKC folds full-width letters and digits
    ("caf\u00e9 au lait", "cafe\u0301 au lait"),  # composed and decomposed é are one password
    ("no\u00a0break\u2003spaces", "no break spaces"),  # non-ASCII spaces map to U+0020
    ("ogham\u1680space", "ogham space"),  # even one NFKC would keep
    ("soft\u00adhyphen\u200bgone", "softhyphengone"),  # B.1 characters map to nothing
])
def test_non_ascii_passwords_authenticate_as_the_server_prepared_them(stored, typed):
    users = {"bob": make_credential(stored)}
    assert authenticate("bob", typed, users) == "bob"
    assert authenticate("bob", stored, users) == "bob"


def test_the_client_computes_the_iterations_the_credential_has():
    assert authenticate("bob", PASSWORD, {"bob": make_credential(PASSWORD, iterations=SCRAM_ITERATIONS_DEFAULT + 1)})


@pytest.mark.parametrize("password, reason", [
    ("bell\x07character", "control character"),
    ("private\ue000use", "private use"),
    ("hebrew \u05d0 in latin", "right-to-left"),
    ("\u05d0 starts right-to-left, ends not", "right-to-left"),
    ("\u05d0 right-to-left around latin \u05d0", "right-to-left and left-to-right"),
])
def test_a_password_saslprep_refuses_is_refused_on_both_sides(password, reason):
    with pytest.raises(InvalidConfig, match=f"password of user 'bob' cannot be used for SCRAM.*{reason}"):
        ScramClientExchange("bob", password)
    with pytest.raises(InvalidConfig, match="cannot be used for SCRAM"):
        make_credential(password)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)) | st.sampled_from(
    "\u00a0\u00ad\u05d0\u0627\u200b\u1680\u2003\ufb01\u0301 aZ09\x07\ue000\U000e0001\u202e\u0340"), max_size=12))
def test_saslprep_agrees_with_the_servers(text):
    """The client prepares a password exactly as the server prepared it for the credential."""
    from scramp.utils import ScramException
    from scramp.utils import saslprep as servers_saslprep
    try:
        expected = servers_saslprep(text)
    except ScramException:
        with pytest.raises(ValueError):
            saslprep(text)
    else:
        assert saslprep(text) == expected


def test_the_client_speaks_without_channel_binding_and_checks_the_server_before_trusting_it():
    server, client = ScramServerExchange(USERS.get), ScramClientExchange("bob", PASSWORD)
    first = client.first()
    assert first.startswith(b"n,,n=bob,r=") and len(first) > len(b"n,,n=bob,r=") + 30
    final = client.respond(server.step(first))
    assert final.startswith(b"c=biws,r=" + first.split(b",r=")[1])
    server_final = server.step(final)
    flipped = bytearray(base64.b64decode(server_final[2:]))
    flipped[-1] ^= 1
    with pytest.raises(AuthenticationFailed, match="did not prove.*"):
        client.finish(b"v=" + base64.b64encode(bytes(flipped)))
    with pytest.raises(AuthenticationFailed, match="out of turn"):
        client.finish(server_final)  # a failed check stays failed, even given the right signature


@pytest.mark.parametrize("server_final, match", [
    (b"e=invalid-proof", "error 'invalid-proof'"),
    (b"e=other-error,x=1", "error 'other-error'"),
    (b"v=not base64!", "not base64"),
    (b"x=abc", "not v="),
    (b"", "malformed"),
    (b"m=ext,v=abc", "mandatory extension"),
])
def test_a_server_final_that_is_no_signature_fails(server_final, match):
    server, client = ScramServerExchange(USERS.get), ScramClientExchange("bob", PASSWORD)
    server.step(client.respond(server.step(client.first())))
    with pytest.raises(AuthenticationFailed, match=match):
        client.finish(server_final)


def _started(client: ScramClientExchange) -> tuple[str, dict[str, str]]:
    """The nonce ``client`` sent, and the fields of the server's answer."""
    first = client.first()
    server_first = ScramServerExchange(USERS.get).step(first).decode()
    return first.decode().split(",r=")[1], dict(part.split("=", 1) for part in server_first.split(","))


@pytest.mark.parametrize("edit, match", [
    (lambda r, fields: {**fields, "r": "x" + r}, "nonce does not extend"),
    (lambda r, fields: {**fields, "r": r[:len(r) // 2]}, "nonce does not extend"),
    (lambda r, fields: {**fields, "r": fields["r"][:len(r)]}, "nonce does not extend"),  # no server part
    (lambda r, fields: {**fields, "r": fields["r"] + "\u00e9"}, "printable ASCII"),
    (lambda r, fields: {**fields, "i": str(SCRAM_ITERATIONS_DEFAULT - 1)}, "fewer than the 4096"),
    (lambda r, fields: {**fields, "i": "0"}, "no positive whole number"),
    (lambda r, fields: {**fields, "i": "04096"}, "no positive whole number"),
    (lambda r, fields: {**fields, "i": "-4096"}, "no positive whole number"),
    (lambda r, fields: {**fields, "i": "４０９６"}, "no positive whole number"),
    (lambda r, fields: {**fields, "s": "***"}, "salt is not base64"),
    (lambda r, fields: {"s": fields["s"], "r": fields["r"], "i": fields["i"]}, "must start with r=, s=, i="),
    (lambda r, fields: {"r": fields["r"], "s": fields["s"]}, "must start with r=, s=, i="),
    (lambda r, fields: {"e": "unknown-user"}, "error 'unknown-user'"),
    (lambda r, fields: {"m": "x", **fields}, "mandatory extension"),
])
def test_a_server_first_the_client_must_not_answer_fails(edit, match):
    client = ScramClientExchange("bob", PASSWORD)
    client_nonce, fields = _started(client)
    server_first = ",".join(f"{k}={v}" for k, v in edit(client_nonce, fields).items()).encode()
    with pytest.raises(AuthenticationFailed, match=match):
        client.respond(server_first)
    with pytest.raises(AuthenticationFailed, match="out of turn"):
        client.respond(server_first.replace(b"x", b"y"))


def test_a_server_first_with_extensions_after_its_fields_is_answered():
    client = ScramClientExchange("bob", PASSWORD)
    _, fields = _started(client)
    server_first = f"r={fields['r']},s={fields['s']},i={fields['i']},x=an extension".encode()
    assert client.respond(server_first).startswith(b"c=biws,r=" + fields["r"].encode() + b",p=")


def test_calls_out_of_turn_fail():
    client = ScramClientExchange("bob", PASSWORD)
    with pytest.raises(AuthenticationFailed, match=r"out of turn: the exchange expected first\(\)"):
        client.finish(b"v=abc")
    with pytest.raises(AuthenticationFailed, match="it is over"):
        client.first()  # a failed exchange stays failed
    client = ScramClientExchange("bob", PASSWORD)
    client.first()
    with pytest.raises(AuthenticationFailed, match=r"expected respond\(\)"):
        client.first()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_mangled_server_message_raises_only_authentication_failed(data):
    """Edits of a real server-first and server-final reach the client's inner checks (nonce,
    salt, iterations, signature), which random bytes seldom do."""

    def mangled(message: bytes) -> bytes:
        edited = bytearray(message)
        for _ in range(data.draw(st.integers(0, 3))):
            at = data.draw(st.integers(0, len(edited)))
            cut = data.draw(st.integers(0, 3))
            edited[at:at + cut] = data.draw(st.binary(max_size=4) | st.sampled_from(
                [b",", b"=", b"e=", b",m=x", b"\0", b"i=1", b"9999999", b"\xc3\xa9"]))
        return bytes(edited)

    server, client = ScramServerExchange(USERS.get), ScramClientExchange("bob", PASSWORD)
    try:
        server_final = server.step(client.respond(mangled(server.step(client.first()))))
        edited_final = mangled(server_final)
        client.finish(edited_final)
    except AuthenticationFailed:
        return
    # The client accepted: the server did too, and what the client checked is the server's signature.
    assert server.principal == "bob"
    assert edited_final.split(b",")[0] == server_final


@pytest.mark.parametrize("password", ["plain-password-1", "pässwörd-ünïcode", "\uff50\uff41\uff53\uff53-full-width"])
def test_a_credential_made_on_the_standard_library_is_the_one_scramp_derives(password):
    from scramp import ScramMechanism

    credential = make_credential(password)
    _, stored_key, server_key, _ = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=credential.iterations, salt=credential.salt)
    assert (credential.stored_key, credential.server_key) == (stored_key, server_key)


def _authenticate_with(keys: PasswordKeys, user: str, password: str, users) -> str | None:
    server = ScramServerExchange(users.get)
    client = ScramClientExchange(user, password, keys)
    client.finish(server.step(client.respond(server.step(client.first()))))
    return server.principal


def test_a_client_derives_a_salted_password_once_and_authenticates_with_the_kept_keys():
    keys = PasswordKeys()
    assert [_authenticate_with(keys, "bob", PASSWORD, USERS) for _ in range(3)] == ["bob"] * 3
    assert keys.derivations == 1


def test_kept_keys_never_authenticate_another_password_nor_survive_a_new_salt():
    keys = PasswordKeys()
    assert _authenticate_with(keys, "bob", PASSWORD, USERS) == "bob"
    with pytest.raises(AuthenticationFailed):
        _authenticate_with(keys, "bob", "not the password", USERS)
    reset = {"bob": make_credential(PASSWORD)}  # the same password stored again: a new salt
    assert _authenticate_with(keys, "bob", PASSWORD, reset) == "bob"
    assert keys.derivations == 3


def test_the_kept_keys_are_bounded_and_the_oldest_go_first():
    keys = PasswordKeys(keys_max=2)
    for salt in (b"salt-one", b"salt-two", b"salt-three"):
        keys.of("bob", b"pw", salt, SCRAM_ITERATIONS_DEFAULT)
    keys.of("bob", b"pw", b"salt-three", SCRAM_ITERATIONS_DEFAULT)
    assert keys.derivations == 3
    keys.of("bob", b"pw", b"salt-one", SCRAM_ITERATIONS_DEFAULT)  # forgotten: derived again
    assert keys.derivations == 4


def librdkafka_final(client_first_bare: str, server_first: str, password: str, nonce: str) -> bytes:
    """A client-final message with ``nonce`` and the proof a client knowing ``password`` makes over it."""
    import hashlib
    import hmac

    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attributes["s"]), int(attributes["i"]))
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth_message, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("password, doubled, authenticates", [
    (PASSWORD, True, True),            # librdkafka before 2.6.1: its own nonce, then the server's whole
    ("not the password", True, False),
    (PASSWORD, False, True),           # RFC 5802: the server's nonce
])
def test_librdkafkas_doubled_client_nonce_authenticates_with_the_right_password_only(password, doubled, authenticates):
    server = ScramServerExchange(USERS.get)
    client_nonce = "H:^zz<tcW.{clqvzcOsvj_`Ayf57F@fQ"  # librdkafka's printable nonces
    client_first_bare = f"n=bob,r={client_nonce}"
    server_first = server.step(f"n,,{client_first_bare}".encode()).decode()
    nonce = dict(part.split("=", 1) for part in server_first.split(","))["r"]
    final = librdkafka_final(client_first_bare, server_first, password, client_nonce + nonce if doubled else nonce)
    if authenticates:
        server.step(final)
        assert server.principal == "bob"
    else:
        with pytest.raises(AuthenticationFailed):
            server.step(final)


@pytest.mark.parametrize("tampered", ["the client's nonce only", "another prefix", "the server's nonce twice"])
def test_any_other_client_final_nonce_is_refused(tampered):
    server = ScramServerExchange(USERS.get)
    client_nonce = "abcdefghijklmnop"
    client_first_bare = f"n=bob,r={client_nonce}"
    server_first = server.step(f"n,,{client_first_bare}".encode()).decode()
    nonce = dict(part.split("=", 1) for part in server_first.split(","))["r"]
    sent = {"the client's nonce only": client_nonce, "another prefix": "zzzzzzzzzzzzzzzz" + nonce,
            "the server's nonce twice": nonce + nonce}[tampered]
    with pytest.raises(AuthenticationFailed):
        server.step(librdkafka_final(client_first_bare, server_first, PASSWORD, sent))
    assert server.principal is None
