"""``swarm cluster init`` and ``swarm admit``: the operator's side of admission (``agents.clusterdir``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agents.cli.errors import CommandError, UsageError
from agents.clusterdir import AdmissionError, ClusterDir
from agents.core.admission import ROLES


def cmd_cluster_init(args: argparse.Namespace) -> int:
    try:
        cluster = ClusterDir.init(Path(args.dir), args.name)
    except AdmissionError as exc:
        raise CommandError(str(exc)) from None
    print(f"cluster {cluster.name!r}: authority {cluster.authority.peer_id}\n"
          f"  {args.dir}/authority.key  the secret that admits members: keep it here, give it to nobody\n"
          f"  {args.dir}/cluster.json   public\n"
          f"admit members with: swarm admit {args.dir} --role ROLE --data-dir MEMBER_DIR")
    return 0


def cmd_admit(args: argparse.Namespace) -> int:
    if bool(args.data_dir) == bool(args.peer):
        raise UsageError("admit either a local member (--data-dir MEMBER_DIR: its key is made if new, its ticket "
                         "written there) or a remote one (--peer PEER_ID [--out FILE])")
    try:
        cluster = ClusterDir.open(Path(args.dir))
        if args.data_dir:
            ticket = cluster.admit_dir(Path(args.data_dir), args.role, args.name or "")
            where = f"{args.data_dir}/ticket.json"
        else:
            ticket = cluster.admit(args.peer, args.role, args.name or "")
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(ticket.to_json(), indent=2) + "\n")
                where = args.out
            else:
                json.dump(ticket.to_json(), sys.stdout, indent=2)
                print()
                where = "standard output"
    except AdmissionError as exc:
        raise CommandError(str(exc)) from None
    print(f"admitted {ticket.peer} as {ticket.role} in cluster {ticket.cluster!r}; ticket in {where}",
          file=sys.stderr if where == "standard output" else sys.stdout)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="make a cluster: its authority key and public files")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="create DIR/authority.key, DIR/cluster.json and DIR/members.json")
    init.add_argument("dir", metavar="DIR")
    init.add_argument("--name", default="default", help="the cluster's name (its gossip topic)")
    init.set_defaults(run=cmd_cluster_init)

    admit = sub.add_parser("admit", help="issue a member's ticket: its peer id admitted in one role")
    admit.add_argument("dir", metavar="CLUSTER_DIR", help="made by 'swarm cluster init'")
    admit.add_argument("--role", required=True, choices=ROLES)
    admit.add_argument("--data-dir", metavar="MEMBER_DIR", help="a local member: key made if new, ticket written here")
    admit.add_argument("--peer", metavar="PEER_ID", help="a remote member, by the peer id it sent you")
    admit.add_argument("--out", metavar="FILE", help="with --peer: write the ticket here (default: standard output)")
    admit.add_argument("--name", help="a name for members.json (default: the data directory's name)")
    admit.set_defaults(run=cmd_admit)
