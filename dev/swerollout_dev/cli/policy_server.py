"""`swerollout policy-server`: run the SGLang-compatible policy server in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from swerollout_dev.policy_server.errors import PolicyServerError
from swerollout_dev.policy_server.settings import DEFAULT_PORT, DEFAULT_TOKENIZER, ServerSettings
from swerollout_dev.policy_server.wire import FaultSettings


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", default="oracle", help="tiny-lm | oracle | null (default: oracle)")
    parser.add_argument("--tasks", type=Path, help="JSONL of SWE-bench instances with gold `patch` (oracle)")
    parser.add_argument(
        "--tokenizer", default=DEFAULT_TOKENIZER, help=f"bundled name or directory (default: {DEFAULT_TOKENIZER})"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"0 picks a free port (default: {DEFAULT_PORT})")
    parser.add_argument("--weight-version", default="default", help="initial meta_info.weight_version")
    parser.add_argument("--seed", type=int, default=0, help="tiny-lm weights, default request seeds, fault dice")
    parser.add_argument("--context-length", type=int, default=32768, help="max prompt + new tokens")
    parser.add_argument("--delay-per-token", type=float, default=0.0, metavar="S", help="fault: sleep after each token")
    parser.add_argument("--abort-after-tokens", type=int, metavar="N", help="fault: abort each request after N tokens")
    parser.add_argument(
        "--error-rate", type=float, default=0.0, metavar="R", help="fault: fraction of requests failing with 500"
    )
    parser.add_argument(
        "--fail-next", type=int, default=0, metavar="N", help="fault: fail the next N requests with 503"
    )
    parser.add_argument(
        "--oracle-ledger",
        type=int,
        default=0,
        metavar="N",
        help="oracle: N turns appending 'step i' to .swerollout-ledger before the fix, so the final "
        "patch shows how many times each command ran (default: 0)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SGLANG_API_KEY") or None,
        help="as SGLang's: every route but /health* needs 'Authorization: Bearer KEY' (env SGLANG_API_KEY)",
    )
    parser.add_argument(
        "--admin-api-key",
        default=os.environ.get("SGLANG_ADMIN_API_KEY") or None,
        help="as SGLang's: admin routes (aborts, pause/continue, weight updates, flush_cache, faults) "
        "need 'Authorization: Bearer KEY' (env SGLANG_ADMIN_API_KEY)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="one line per finished request, abort, pause and version change at INFO",
    )
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        policy=args.policy,
        tasks=args.tasks,
        tokenizer=args.tokenizer,
        host=args.host,
        port=args.port,
        weight_version=args.weight_version,
        seed=args.seed,
        context_length=args.context_length,
        oracle_ledger=args.oracle_ledger,
        api_key=args.api_key,
        admin_api_key=args.admin_api_key,
        faults=FaultSettings(
            delay_per_token=args.delay_per_token,
            abort_after_tokens=args.abort_after_tokens,
            error_rate=args.error_rate,
            fail_next=args.fail_next,
        ),
    )


def run(args: argparse.Namespace) -> int:
    from swerollout_dev.policy_server.launch import ready_line, serve

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        for problem in exc.errors():
            option = "--" + "-".join(str(p) for p in problem["loc"]).replace("_", "-")
            message = str(problem["msg"]).removeprefix("Value error, ")
            print(f"policy-server: {option if problem['loc'] else 'options'}: {message}", file=sys.stderr)
        return 2

    # This process serves until stopped: no torch for it (numpy models; tokenizers only).
    from swerollout.tokenizers import keep_torch_out

    keep_torch_out()
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(settings, stop, lambda url: print(ready_line(url, settings), flush=True))

    try:
        asyncio.run(main())
    except PolicyServerError as exc:
        print(f"policy-server: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"policy-server: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 1
    return 0
