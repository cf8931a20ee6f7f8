"""``nagare tune show|clear``: the auto-tuner's persistent cache (one JSON file in the cache folder)."""
from __future__ import annotations

import argparse
import json
import sys

from nagare.engine.autotune import default_cache


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nagare tune", description="Inspect or clear the auto-tuner's cache.")
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("show", help="list tuned configurations")
    s.add_argument("--match", default="", help="only keys containing this text (GPU, kernel, shape …)")
    s.add_argument("--json", action="store_true", help="print the raw entries as JSON")
    c = sub.add_parser("clear", help="forget tuned configurations (all, or those matching)")
    c.add_argument("--match", default="", help="only keys containing this text")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    cache = default_cache()
    if args.action == "clear":
        n = cache.remove(args.match)
        what = f"matching {args.match!r} " if args.match else ""
        print(f"removed {n} tuned configuration(s) {what}from {cache.path}")
        return 0
    entries = {k: v for k, v in cache.load().items() if args.match in k}
    if args.json:
        print(json.dumps(entries, indent=1, sort_keys=True))
        return 0
    print(f"{cache.path}: {len(entries)} tuned configuration(s)")
    if not entries:
        return 0
    rows = [("GPU", "kernel", "shape", "dtype", "options", "config", "ms", "measured")]
    for key, e in sorted(entries.items()):
        parts = key.split("|", 4) + [""] * 5
        cfg = " ".join(f"{k}={v}" for k, v in e.get("config", {}).items())
        rows.append((*parts[:5], cfg, f"{e.get('ms', float('nan')):.4g}", str(e.get("measured", ""))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
