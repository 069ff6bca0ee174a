"""`swerollout view`: a batch and its trajectories in the browser.

    swerollout view --from results.jsonl          # or .parquet, what `swerollout results` wrote
    swerollout view --batch NAME [-n NS] [--store-url URL | --results-url URL]
    swerollout view --from results.jsonl --out report.html   # one self-contained file

It serves on 127.0.0.1 (loopback only) unless --host says otherwise, and prints the URL.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

from swerollout.cli.rollouts import EXIT_OK, EXIT_USAGE, add_connection_args, run_client_command
from swerollout.client import RolloutClient
from swerollout.tokenizers import TokenizerError
from swerollout.viewer.model import ViewRecord
from swerollout.viewer.source import SourceError, load_batch, load_file

DEFAULT_PORT = 8377
LOOPBACK = "127.0.0.1"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _show(args: argparse.Namespace, records: list[ViewRecord], source: str) -> int:
    from swerollout.viewer.page import report_html
    from swerollout.viewer.server import Catalog, make_server

    if not records:
        print(f"error: {source} holds no rollouts", file=sys.stderr)
        return EXIT_USAGE
    catalog = Catalog(records, source)
    try:
        if args.out:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(report_html(catalog.summary(), catalog.all_details()), encoding="utf-8")
            tmp.replace(out)
            print(f"wrote {len(records)} rollouts to {out} (one file, opens offline in any browser)")
            return EXIT_OK
        catalog.summary()
    except TokenizerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        server = make_server(catalog, args.host, args.port)
    except OSError as exc:
        print(
            f"error: --host {args.host} --port {args.port}: cannot listen ({exc.strerror}); --port 0 picks a free port",
            file=sys.stderr,
        )
        return EXIT_USAGE
    host, port = str(server.server_address[0]), int(server.server_address[1])
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {len(records)} rollouts of {source} at http://{shown}:{port}/", flush=True)
    if _is_loopback(args.host):
        print("listening on loopback only (this machine); --host ADDRESS serves other machines", flush=True)
    else:
        print(
            f"warning: listening on {args.host}: anyone who can reach it reads these trajectories (no authentication)",
            flush=True,
        )
    print("Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def _from_cluster(args: argparse.Namespace, client: RolloutClient) -> int:
    try:
        records = load_batch(client, args.batch)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _show(args, records, f"batch {args.batch}")


def _run(args: argparse.Namespace) -> int:
    if args.batch:
        return run_client_command(_from_cluster)(args)
    try:
        records = load_file(Path(args.source))
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _show(args, records, str(args.source))


def register(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--batch", help="a batch on the cluster (read through the client, like `swerollout results`)")
    source.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="a results file `swerollout results` wrote (.jsonl or .parquet); no cluster needed",
    )
    parser.add_argument("--out", "-o", help="write one self-contained HTML file instead of serving")
    parser.add_argument(
        "--host", default=LOOPBACK, help=f"address to listen on (default {LOOPBACK}: this machine only)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: a free one)")
    add_connection_args(parser, results=True)
    parser.set_defaults(func=_run)
