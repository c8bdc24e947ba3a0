"""``python -m cudakit COMMAND``: command-line tools.

Commands:
  info    what cudakit sees on this machine (paste it into bug reports), like torch's
          ``collect_env``: versions, backend, devices, optional libraries, allocator settings.
  trace merge TRACE.json ANNOTATIONS.pkl -o OUT.json
          joins graph kernel annotations (cudakit.profiler.save_annotations) with a Chrome
          trace made by torch.profiler or another tool: args.update(annotation) on every event
          whose "graph node id" is annotated. Exit status 2 on unusable input.
  trace merge-ranks RANK0.json RANK1.json ... -o ALL.json
          puts the traces of several ranks (cudakit.profiler.trace or torch.profiler, one per
          rank) on one timeline: one group of process tracks per rank, clocks aligned from
          each trace's baseTimeNanoseconds (exact on one host; across hosts within the hosts'
          clock offset). Exit status 2 on unusable input.
  memory replay FILE... [--conf SETTINGS]... [--backend B] [--device N] [--json]
          replays a memory snapshot pickle (taken with history) or an allocation trace through
          cudakit's caching allocator under each allocator setting (default: the defaults,
          expandable_segments:False and :True) and prints peak allocated / reserved, their
          ratio and the device calls: "will it fit with these settings". Emulated backend by
          default (no GPU needed). Exit status 2 on unusable input, 1 if a replay failed.
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
    p_trace = sub.add_parser("trace", help="trace tools (merge, merge-ranks)")
    trace_sub = p_trace.add_subparsers(dest="trace_command", metavar="TRACE_COMMAND")
    p_merge = trace_sub.add_parser(
        "merge", help="merge graph kernel annotations into a Chrome trace",
        description="Joins ANNOTATIONS.pkl (cudakit.profiler.save_annotations, or a pickle of "
                    "dict(get_kernel_annotations())) with TRACE.json (.json or .json.gz).")
    p_merge.add_argument("trace", metavar="TRACE.json")
    p_merge.add_argument("annotations", metavar="ANNOTATIONS.pkl")
    p_merge.add_argument("-o", "--output", required=True, metavar="OUT.json",
                         help="merged trace (.json, or .json.gz to compress)")
    p_merge.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    p_ranks = trace_sub.add_parser(
        "merge-ranks", help="put the traces of several ranks on one timeline",
        description="Merges one Chrome trace per rank (.json or .json.gz) into one: a group of "
                    "process tracks per rank, clocks aligned from baseTimeNanoseconds.")
    p_ranks.add_argument("traces", nargs="+", metavar="RANK.json")
    p_ranks.add_argument("-o", "--output", required=True, metavar="ALL.json",
                         help="merged trace (.json, or .json.gz to compress)")
    p_ranks.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    p_memory = sub.add_parser("memory", help="memory tools (replay)")
    memory_sub = p_memory.add_subparsers(dest="memory_command", metavar="MEMORY_COMMAND")
    p_replay = memory_sub.add_parser(
        "replay", help="replay a snapshot or trace under allocator settings",
        description="Replays FILE (a snapshot pickle with history, or a .trace.gz allocation "
                    "trace) through cudakit's caching allocator, once per --conf, and prints "
                    "peak allocated, peak reserved, their ratio and the device calls.")
    p_replay.add_argument("files", nargs="+", metavar="FILE")
    p_replay.add_argument("--conf", action="append", metavar="SETTINGS",
                          help='a CUDAKIT_ALLOC_CONF string ("" = the defaults); repeatable')
    from ._memory_replay import BACKENDS, NO_GPU_BACKEND

    p_replay.add_argument("--backend", choices=BACKENDS, default=NO_GPU_BACKEND,
                          help=f"where the replay allocates (default {NO_GPU_BACKEND}: no GPU "
                               "needed)")
    p_replay.add_argument("--device", type=int, default=None,
                          help="the snapshot's device to replay (default: the one with the "
                               "longest history)")
    p_replay.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.command == "memory":
        if args.memory_command == "replay":
            from . import _memory_replay

            return _memory_replay.main(args.files, args.conf, args.backend, args.device, args.json)
        p_memory.print_help(sys.stderr)
        return 2
    if args.command == "trace":
        if args.trace_command == "merge":
            from . import _trace_merge

            return _trace_merge.main(args.trace, args.annotations, args.output, args.quiet)
        if args.trace_command == "merge-ranks":
            from . import _trace_ranks

            return _trace_ranks.main(args.traces, args.output, args.quiet)
        p_trace.print_help(sys.stderr)
        return 2
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
