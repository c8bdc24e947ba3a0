"""``python -m cudakit COMMAND``: command-line tools.

Commands:
  info    what cudakit sees on this machine (paste it into bug reports), like torch's
          ``collect_env``: versions, backend, devices, optional libraries, allocator settings.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cudakit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_info = sub.add_parser("info", help="versions, backend, devices, libraries, settings")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.command == "info":
        from . import _info

        report = _info.collect()
        if args.json:
            import json

            print(json.dumps(report, indent=2, default=str))
        else:
            print(_info.format_report(report))
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
