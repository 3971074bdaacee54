"""The benchmark's picture: each setting's speedup per prompt category as grouped bars, the
target alone marked at 1.0x, drawn with matplotlib: an optional extra (`tandem[chart]`), since
only `tandem bench --chart` needs it. `check_available` refuses the flag before the benchmark
runs, in one line that says how to get it."""

from __future__ import annotations

import io
from collections.abc import Sequence

from tandem.engine import TandemError

MISSING = (
    "drawing --chart needs matplotlib, which is not installed: add it to Tandem's environment "
    "(.venv/bin/pip install matplotlib; as a tool: pipx inject tandem matplotlib, or "
    "uv tool install --with matplotlib .)"
)


def check_available() -> None:
    """TandemError (MISSING) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TandemError(MISSING) from None


def speedup_chart(
    title: str, groups: Sequence[str], series: Sequence[str], values: Sequence[Sequence[float]]
) -> bytes:
    """Grouped bars as a PNG file's bytes (the caller writes them): values[g][s] is the speedup
    of series s in group g; the target alone is the dashed line at 1.0x."""
    check_available()
    # A bare Figure (not pyplot): no global state and no display, whatever the machine has.
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter

    fig = Figure(figsize=(max(6.0, 1.1 * len(groups) + 3.0), 4.5), dpi=110, layout="constrained")
    ax = fig.subplots()
    n = max(1, len(series))
    width = 0.8 / n
    for s, name in enumerate(series):
        xs = [g + (s - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [row[s] for row in values], width, label=name, zorder=2)
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1.2, label="target alone", zorder=3)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.2fx"))
    ax.set_ylim(0, max([1.5, *(v for row in values for v in row)]) * 1.1)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.set_title(title)
    ax.set_ylabel("decode tokens/s, relative to the target alone")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()
