"""``mafka4 user add|list|remove`` and ``mafka4 acl add|remove|list``: who may connect, and what they may do.

A password is never an argument (it would sit in the shell's history and in ``ps``): it is read
from standard input (``--password-stdin``) or asked for twice without echo. A name, a password
or a rule is checked before connecting, so that a bad one is reported as such (exit 2) and not as
"no local cluster". The commands speak to the cluster's client port only (``client.security_admin``).
"""

from __future__ import annotations

import argparse
import sys

from mafka4.errors import InvalidConfig
from mafka4.security.acl import CLUSTER_RESOURCE, AclRule, Operation, PatternType, Permission, ResourceType
from mafka4.security.principals import validate_password, validate_user_name


def add_commands(commands) -> None:
    user = commands.add_parser("user", help="add, list or remove the users who may connect")
    user_commands = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    add = user_commands.add_parser("add", help="add a user, or change its password (--replace)")
    add.add_argument("name")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from standard input (else it is asked for twice)")
    add.add_argument("--replace", action="store_true", help="change the password of a user that exists")
    add.set_defaults(run=_cmd_user_add)
    user_commands.add_parser("list", help="list user names").set_defaults(run=_cmd_user_list)
    remove = user_commands.add_parser("remove", help="remove a user (its ACLs stay)")
    remove.add_argument("name")
    remove.set_defaults(run=_cmd_user_remove)

    acl = commands.add_parser("acl", help="add, remove or list the rules of who may do what")
    acl_commands = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for action, run, text in (("add", _cmd_acl_add, "allow (or --deny) a principal an operation"),
                              ("remove", _cmd_acl_remove, "remove a rule, given as it was added")):
        rule = acl_commands.add_parser(action, help=text)
        rule.add_argument("--principal", required=True, help="a user name, or '*' for every user")
        rule.add_argument("--deny", action="store_true", help="deny the operation (a deny wins over any allow)")
        rule.add_argument("--operation", required=True, choices=[operation.value for operation in Operation])
        resource = rule.add_mutually_exclusive_group(required=True)
        resource.add_argument("--topic", metavar="NAME", help="a topic ('*': every topic)")
        resource.add_argument("--group", metavar="NAME", help="a consumer group ('*': every group)")
        resource.add_argument("--cluster", action="store_true", help="the cluster (users, ACLs)")
        rule.add_argument("--prefixed", action="store_true", help="NAME is a prefix: every topic or group it starts")
        rule.set_defaults(run=run)
    acl_commands.add_parser("list", help="list the rules, as acl add options").set_defaults(run=_cmd_acl_list)


def _read_password(args: argparse.Namespace) -> str:
    import getpass  # here: it loads the terminal's modules, which every other command would pay for

    if args.password_stdin:
        # One line, as `docker login --password-stdin` reads it: the newline that ends it is no part of it.
        return validate_password(sys.stdin.read().rstrip("\r\n"), args.name)
    password = validate_password(getpass.getpass(f"password of {args.name}: "), args.name)
    if getpass.getpass(f"password of {args.name} again: ") != password:
        raise InvalidConfig(f"the two passwords of user {args.name!r} differ: run 'mafka4 user add {args.name}' again")
    return password


def _cmd_user_add(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import add_user

    validate_user_name(args.name)
    add_user(args.name, _read_password(args), replace=args.replace)
    print(f"{'replaced the password of' if args.replace else 'added'} user {args.name!r}")
    return 0


def _cmd_user_list(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import list_users

    for name in list_users():
        print(name)
    return 0


def _cmd_user_remove(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import remove_user

    remove_user(args.name)
    print(f"removed user {args.name!r}")
    return 0


def acl_rule(args: argparse.Namespace) -> AclRule:
    """The rule an ``acl add`` or ``acl remove`` command line names; ``InvalidConfig`` naming a bad field."""
    if args.cluster:
        resource_type, name = ResourceType.CLUSTER, CLUSTER_RESOURCE
    else:
        resource_type = ResourceType.TOPIC if args.topic is not None else ResourceType.GROUP
        name = args.topic if args.topic is not None else args.group
    return AclRule(args.principal, Permission.DENY if args.deny else Permission.ALLOW, Operation(args.operation),
                   resource_type, PatternType.PREFIXED if args.prefixed else PatternType.LITERAL, name)


def _cmd_acl_add(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import add_acl

    rule = acl_rule(args)
    add_acl(rule)
    print(f"added ACL {rule.describe()}")
    return 0


def _cmd_acl_remove(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import remove_acl

    rule = acl_rule(args)
    remove_acl(rule)
    print(f"removed ACL {rule.describe()}")
    return 0


def _cmd_acl_list(args: argparse.Namespace) -> int:
    from mafka4.client.security_admin import list_acls

    for rule in list_acls():
        print(rule.describe())
    return 0
