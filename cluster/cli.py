"""The `pdserve` command line: one subcommand per verb, each a thin shell over a library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cluster import cmd_bench, cmd_generate, cmd_router, cmd_up, cmd_workers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdserve",
        description="pdserve: a disaggregated prefill/decode LLM serving cluster.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmd_generate.add_parser(sub)
    cmd_bench.add_parser(sub)
    cmd_workers.add_parsers(sub)
    cmd_router.add_parser(sub)
    cmd_up.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
