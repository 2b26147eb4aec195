"""``mafka4 user`` and ``mafka4 acl`` without a cluster: what a command line parses to, what it sends, its exit codes.

Commands run against an empty ``$MAFKA4_HOME``, where they must refuse bad input first (exit 2)
or find no cluster (exit 1). What a command would send is caught at ``call_once``.
"""

from __future__ import annotations

import io
import shlex

import pytest

from mafka4 import cli
from mafka4.cli.security import acl_rule
from mafka4.client import security_admin
from mafka4.errors import NotAuthorized, ProtectedUser, UserExists
from mafka4.protocol.admin_api import AclAddRequest, UserAddAnswer, UserAddRequest, credential_of, rule_of
from mafka4.security.acl import CLUSTER_RESOURCE, AclRule, AclTable, Operation, PatternType, Permission, ResourceType
from test_security_stores import authenticates

PASSWORD = "carol-password-1"


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))
    for name in ("MAFKA4_BOOTSTRAP", "MAFKA4_USER", "MAFKA4_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sent(monkeypatch):
    """The requests the commands send, each answered as if a node had accepted it."""
    requests = []

    def call_once(request, home=None):
        requests.append(request)
        return UserAddAnswer(request.user) if isinstance(request, UserAddRequest) else None

    monkeypatch.setattr(security_admin, "call_once", call_once)
    return requests


def parse(*argv: str):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("rule", [
    AclRule("bob", Permission.ALLOW, Operation.PRODUCE, ResourceType.TOPIC, PatternType.LITERAL, "orders"),
    AclRule("bob", Permission.DENY, Operation.CONSUME, ResourceType.GROUP, PatternType.PREFIXED, "audit."),
    AclRule("*", Permission.ALLOW, Operation.DESCRIBE, ResourceType.TOPIC, PatternType.LITERAL, "*"),
    AclRule("ops", Permission.ALLOW, Operation.ALTER, ResourceType.CLUSTER, PatternType.LITERAL, CLUSTER_RESOURCE),
])
def test_the_options_a_rule_is_printed_with_parse_back_to_the_rule(rule):
    # acl list prints them, and refusals quote them as the fix: each must be a valid command line.
    for action in ("add", "remove"):
        assert acl_rule(parse("acl", action, *shlex.split(rule.describe()))) == rule


def test_the_fixes_quoted_in_refusals_and_store_errors_are_valid_command_lines():
    table = AclTable(())
    with pytest.raises(NotAuthorized) as refused:
        table.check("bob", Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE)
    fix = refused.value.message.split("(mafka4 ")[1].rstrip(")")
    assert acl_rule(parse(*shlex.split(fix))).operation is Operation.ALTER
    for argv in (("user", "add", "bob", "--replace"), ("user", "remove", "bob"), ("user", "list"), ("acl", "list")):
        assert parse(*argv).run is not None


@pytest.mark.parametrize("argv", [
    ["acl", "add", "--principal", "bob", "--operation", "alter"],  # no resource
    ["acl", "add", "--principal", "bob", "--operation", "alter", "--topic", "t", "--cluster"],  # two
    ["acl", "add", "--principal", "bob", "--operation", "fly", "--topic", "t"],
    ["acl", "remove", "--operation", "produce", "--topic", "t"],  # no principal
    ["user", "add", "bob", "a-password-on-the-command-line"],
    ["user", "add", "bob", "--password", "secret-password"],
])
def test_a_command_line_that_does_not_parse_exits_2_with_the_usage(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and "usage: mafka4" in capsys.readouterr().err


@pytest.mark.parametrize("argv, stdin, problem", [
    (["acl", "add", "--principal", "bob smith", "--operation", "produce", "--topic", "t"], "", "ACL field 'principal'"),
    (["acl", "remove", "--principal", "bob", "--operation", "produce", "--group", "a/b"], "", "ACL field 'name'"),
    (["acl", "add", "--principal", "bob", "--operation", "alter", "--cluster", "--prefixed"], "", "drop --prefixed"),
    (["user", "add", "bob smith", "--password-stdin"], PASSWORD, "user name 'bob smith'"),
    (["user", "add", "bob", "--password-stdin"], "short\n", "use at least 8"),
    (["user", "remove", "../bob"], "", "user name '../bob'"),
])
def test_bad_input_exits_2_with_one_line_before_connecting(argv, stdin, problem, monkeypatch, capsys, sent):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("mafka4: error: ") and problem in error and "\n" not in error
    assert sent == []


def test_without_a_cluster_the_commands_exit_1_naming_how_to_start_one(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    for argv in (["user", "add", "carol", "--password-stdin"], ["user", "list"], ["acl", "list"],
                 ["acl", "add", "--principal", "bob", "--operation", "produce", "--topic", "t"]):
        assert cli.main(argv) == 1
        assert "mafka4 up" in capsys.readouterr().err


def test_user_add_sends_a_credential_of_the_password_read_from_stdin_and_never_the_password(monkeypatch, capsys,
                                                                                            sent):
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert cli.main(["user", "add", "carol", "--password-stdin", "--replace"]) == 0
    [request] = sent
    assert request.user == "carol" and request.replace
    assert PASSWORD not in repr(request) and PASSWORD.encode() not in b"".join(
        (request.credential.salt, request.credential.stored_key, request.credential.server_key))
    assert authenticates({"carol": credential_of(request.credential)}, "carol", PASSWORD)
    assert not authenticates({"carol": credential_of(request.credential)}, "carol", "carol-password-2")
    assert "replaced the password of user 'carol'" in capsys.readouterr().out


def test_user_add_asks_for_the_password_twice_and_refuses_two_that_differ(monkeypatch, capsys, sent):
    answers = iter([PASSWORD, PASSWORD + "x"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    assert cli.main(["user", "add", "carol"]) == 2
    assert "differ" in capsys.readouterr().err and sent == []
    answers = iter([PASSWORD, PASSWORD])
    assert cli.main(["user", "add", "carol"]) == 0
    assert [request.user for request in sent] == ["carol"]
    assert authenticates({"carol": credential_of(sent[0].credential)}, "carol", PASSWORD)


def test_acl_add_sends_the_rule_its_options_name(capsys, sent):
    assert cli.main(["acl", "add", "--principal", "bob", "--deny", "--operation", "produce", "--topic", "orders.",
                     "--prefixed"]) == 0
    [request] = sent
    assert isinstance(request, AclAddRequest)
    assert rule_of(request.rule) == AclRule("bob", Permission.DENY, Operation.PRODUCE, ResourceType.TOPIC,
                                            PatternType.PREFIXED, "orders.")
    assert "added ACL --principal bob --deny --operation produce --topic orders. --prefixed" in capsys.readouterr().out


@pytest.mark.parametrize("error, code", [(ProtectedUser("no"), 2), (UserExists("exists"), 2)])
def test_a_refusal_the_node_answers_exits_with_its_code(error, code, monkeypatch, capsys):
    def refuse(request, home=None):
        raise error

    monkeypatch.setattr(security_admin, "call_once", refuse)
    assert cli.main(["user", "remove", "admin"]) == code
    assert capsys.readouterr().err.strip() == f"mafka4: error: {error.message}"
