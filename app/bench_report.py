"""``nagare bench FAMILY``: print the variant matrix and write JSON + Markdown + a roofline plot."""
from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from pathlib import Path

from nagare.engine.bench import BenchResult, bench_case_list, check_only, parse_with, run_bench
from nagare.engine.device import copy_bandwidth
from nagare.engine.families import engine_class, family_module

from nagare import __version__

from .atomic import ExportError, output_writer, write_atomic, write_text_atomic


def table_rows(results: list[BenchResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.ok:
            rows.append([r.case, r.label, f"{r.ms_per_step:.4f}", f"{r.updates_per_s / 1e6:,.1f}",
                         f"{r.gbytes_per_s:,.1f}", f"{r.roofline_pct:.1f}",
                         "" if r.speedup is None else f"{r.speedup:.2f}x"])
        else:
            rows.append([r.case, r.label, "cannot run", "", "", "", r.reason])
    return rows


HEADER = ["case", "variant", "ms/step", "M updates/s", "GB/s", "% roofline", "speed-up / reason"]


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(HEADER, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(HEADER), line(["-" * w for w in widths])] + [line(r) for r in rows])


def markdown(meta: dict, rows: list[list[str]]) -> str:
    dev = meta["device"]
    # what the device reports (a CPU run has no SMs, driver, CUDA or CuPy: those are left out, not "None")
    facts = [("SMs", "multiprocessors"), ("driver", "driver_version"), ("CUDA runtime", "cuda_runtime"),
             ("CuPy", "cupy_version"), ("NumPy", "numpy_version")]
    known = "".join(f", {label} {dev[key]}" for label, key in facts if dev.get(key) is not None)
    out = [f"# nagare bench {meta['family']}", "",
           f"- device: {dev['name']} (backend {meta['backend']}{known})",
           f"- measured copy bandwidth (roofline): {meta['roofline_gbytes_per_s']:.1f} GB/s (read + write)",
           f"- date: {meta['date']}; nagare {meta['nagare']}; command: `{meta['command']}`",
           "- speed-up is relative to the first (default) variant of the same case; "
           "ratios compare runs of one session on one device"]
    if meta.get("update_unit"):
        out.append(f"- an update (M updates/s) is {meta['update_unit']}")
    out += ["",
           "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


@output_writer("the benchmark's roofline plot")
def roofline_plot(results: list[BenchResult], bw: float, title: str, path: Path) -> None:
    """The figure of :func:`roofline_figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = roofline_figure(results, bw, title)
    try:
        write_atomic(path, lambda p: fig.savefig(p, dpi=110, format="png"))
    finally:
        plt.close(fig)


TITLE_PT = 9
CHAR_EM = 0.62  # a DejaVu Sans character's mean advance in em, rounded up: the caption's wrap width


def roofline_figure(results: list[BenchResult], bw: float, title: str):
    """Effective GB/s of every measured variant against the copy bandwidth: one panel per case,
    one horizontal bar per variant (a family's matrix can hold a hundred variants, whose names
    must stay readable), cells that could not run left out. The caption names what is drawn (the
    orange of a bar above the copy bandwidth only where there is one) and is wrapped to the
    figure's width, so a one-case figure keeps its whole title."""
    # matplotlib (≈0.3 s) loads only when a bench writes its PNG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r.ok]
    cases = list(dict.fromkeys(r.case for r in ok)) or ["(no cell ran)"]
    labels = list(dict.fromkeys(r.label for r in ok))
    value = {(r.case, r.label): r.gbytes_per_s for r in ok}
    width = 2.0 + 3.2 * len(cases)
    fig, axes = plt.subplots(1, len(cases), figsize=(width, 1.0), sharey=True, squeeze=False)
    ys = range(len(labels))
    above = False
    for ax, case in zip(axes[0], cases):
        vals = [value.get((case, lab), 0.0) for lab in labels]
        colors = ["tab:orange" if v > bw / 1e9 else "tab:blue" for v in vals]
        above = above or "tab:orange" in colors
        ax.barh(list(ys), vals, height=0.75, color=colors)
        ax.axvline(bw / 1e9, color="k", ls="--", lw=1)
        ax.set_title(case, fontsize=9)
        ax.set_xlabel("effective GB/s", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", lw=0.3)
    axes[0][0].set_yticks(list(ys), labels, fontsize=7)
    axes[0][0].invert_yaxis()
    key = f"bars: effective GB/s from the engine's bytes-per-update model; dashed: copy bandwidth {bw / 1e9:.0f} GB/s"
    if above:
        key += "; orange: a bar above it"
    chars = max(20, int(0.92 * width * 72 / (CHAR_EM * TITLE_PT)))  # what fits across the figure
    lines = textwrap.wrap(title, chars) + textwrap.wrap(f"({key})", chars)
    fig.suptitle("\n".join(lines), fontsize=TITLE_PT)
    # room for the caption's lines above the panels
    fig.set_figheight(max(3.0, 0.9 + 0.16 * len(labels)) + 0.18 * max(0, len(lines) - 2))
    fig.tight_layout()
    return fig


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def bench_folder(family: str, out_dir: str | None, default: str) -> Path:
    """Where a bench writes. The default name (family, device, date) never replaces an earlier run's
    results: a second run that day goes to ``…-2``, ``…-3``. A folder the user names is used as
    given, and replacing its earlier results is said in one line."""
    if out_dir is not None:
        out = Path(out_dir)
        if (out / f"{family}.json").exists():
            print(f"nagare bench: replacing the earlier results in {out}/", file=sys.stderr)
        return out
    out, k = Path(default), 1
    while (out / f"{family}.json").exists():
        k += 1
        out = Path(f"{default}-{k}")
    return out


@output_writer("the benchmark's results (.json, .md)")
def bench_command(family: str, backend, out_dir: str | None, cases: list[str] | None, min_time: float,
                  argv: list[str], only: list[str] | None = None, jobs: int = 0,
                  with_choices: list[str] | None = None) -> int:
    """Measure, print each cell as it is done, and keep ``FAMILY.json`` up to date after every cell
    (``"complete": false`` until the end): a long matrix that is stopped (Ctrl-C, a time limit, a
    crash) keeps every cell already measured. A write that fails (full disk) is said in one line
    (once for the JSON kept up to date, with the cells it still holds), the measuring goes on, and
    the command ends with exit status 4."""
    family_module(family)
    # a bad --case, or a --only that selects nothing, fails before measuring
    case_list = bench_case_list(family, engine_class(family), backend.name, cases)
    extra = parse_with(family, with_choices)
    check_only(family, backend.name, case_list, only, extra)
    info = backend.device_info()
    bw = copy_bandwidth(backend)
    print(f"nagare bench {family}: {info.name} ({backend.name}); roofline {bw / 1e9:.1f} GB/s copy bandwidth")
    date = time.strftime("%Y-%m-%d")
    meta = {"family": family, "backend": backend.name, "device": info.as_dict(), "date": date,
            "nagare": __version__, "roofline_gbytes_per_s": bw / 1e9, "command": " ".join(argv),
            "update_unit": engine_class(family).bench_spec().update_unit}
    out = bench_folder(family, out_dir, f"bench-{family}-{slug(info.name)}-{date}")
    done: list = []
    failed: dict[str, str] = {}  # file → its last error
    saved = {"json": 0}  # cells the JSON on disk holds

    def attempt(name: str, fn, *args) -> bool:
        try:
            fn(*args)
        except ExportError as exc:
            if name not in failed:
                kept = f" ({name} on disk holds {saved['json']} cells)" if name.endswith(".json") else ""
                print(f"nagare bench: {exc}{kept}; measuring goes on", file=sys.stderr, flush=True)
            failed[name] = str(exc)
            return False
        failed.pop(name, None)  # written after all: the file on disk is complete and up to date
        return True

    def write_json(results, complete: bool):
        if attempt(f"{family}.json", lambda: write_text_atomic(out / f"{family}.json", json.dumps(
                {"metadata": dict(meta, complete=complete), "results": [r.as_dict() for r in results]}, indent=1))):
            saved["json"] = len(results)

    def write_reports(results, complete: bool):
        write_json(results, complete=complete)
        m = meta if complete else dict(meta, command=meta["command"] + "  (interrupted: partial)")
        report = markdown(m, table_rows(results)) + engine_class(family).bench_report(results)
        attempt(f"{family}.md", write_text_atomic, out / f"{family}.md", report)
        attempt(f"{family}-roofline.png", roofline_plot, results, bw, f"nagare bench {family} on {info.name}",
                out / f"{family}-roofline.png")

    def not_written() -> int:
        for name, error in failed.items():
            kept = f" ({name} on disk holds {saved['json']} cells)" if name.endswith(".json") else ""
            print(f"nagare bench: NOT WRITTEN: {name}: {error}{kept}", file=sys.stderr)
        return 4 if failed else 0

    def on_result(r):
        if not done:  # the streamed rows' columns, once (the aligned table follows at the end)
            print("  " + " | ".join(HEADER), flush=True)
        print("  " + "  ".join(table_rows([r])[0]), flush=True)
        done.append(r)
        write_json(done, complete=False)

    try:
        results = run_bench(family, backend, cases=cases, min_time=min_time, only=only, jobs=jobs,
                            on_result=on_result, with_choices=extra)
    except KeyboardInterrupt:
        if not done:
            print("nagare bench: interrupted before the first cell was measured; nothing written")
            return 130
        write_reports(done, complete=False)  # the table and plot of what was measured, marked partial
        not_written()
        print(f"nagare bench: interrupted; the {len(done)} cells measured so far are in "
              f"{out}/{family}.json, {family}.md, {family}-roofline.png")
        return 130
    print(format_table(table_rows(results)))
    if meta["update_unit"]:
        print(f"an update (M updates/s) is {meta['update_unit']}")
    family_tables = engine_class(family).bench_report(results)
    if family_tables:  # the family's paper tables, which the Markdown holds too
        print(family_tables)
    write_reports(results, complete=True)
    if failed:
        return not_written()
    print(f"wrote {out}/{family}.json, {family}.md, {family}-roofline.png")
    return 0
