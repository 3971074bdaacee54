"""A grouped bar chart of speedups, written as a PNG with no plotting library.

The benchmark must leave a picture a person can read at a glance, and Tandem's dependencies
stay small, so this draws the bars on an RGB canvas and encodes the PNG itself (zlib + CRC from
the standard library), with a built-in 5x8 bitmap font for labels (lower case, digits and the
few symbols the chart needs; upper case is drawn as lower case).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

RGB = tuple[int, int, int]

# 5 columns x 8 rows per glyph ('#' = ink); row 6 is the baseline row, row 7 the descender.
_GLYPHS: dict[str, str] = {
    "a": "..... ..... .###. ....# .#### #...# .#### .....",
    "b": "#.... #.... ####. #...# #...# #...# ####. .....",
    "c": "..... ..... .###. #.... #.... #.... .###. .....",
    "d": "....# ....# .#### #...# #...# #...# .#### .....",
    "e": "..... ..... .###. #...# ##### #.... .###. .....",
    "f": "..##. .#... ####. .#... .#... .#... .#... .....",
    "g": "..... ..... .#### #...# #...# .#### ....# .###.",
    "h": "#.... #.... ####. #...# #...# #...# #...# .....",
    "i": "..#.. ..... .##.. ..#.. ..#.. ..#.. .###. .....",
    "j": "...#. ..... ..##. ...#. ...#. ...#. #..#. .##..",
    "k": "#.... #.... #..#. #.#.. ##... #.#.. #..#. .....",
    "l": ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###. .....",
    "m": "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.# .....",
    "n": "..... ..... ####. #...# #...# #...# #...# .....",
    "o": "..... ..... .###. #...# #...# #...# .###. .....",
    "p": "..... ..... ####. #...# #...# ####. #.... #....",
    "q": "..... ..... .#### #...# #...# .#### ....# ....#",
    "r": "..... ..... #.##. ##..# #.... #.... #.... .....",
    "s": "..... ..... .#### #.... .###. ....# ####. .....",
    "t": ".#... .#... ####. .#... .#... .#..# ..##. .....",
    "u": "..... ..... #...# #...# #...# #..## .##.# .....",
    "v": "..... ..... #...# #...# #...# .#.#. ..#.. .....",
    "w": "..... ..... #...# #...# #.#.# #.#.# .#.#. .....",
    "x": "..... ..... #...# .#.#. ..#.. .#.#. #...# .....",
    "y": "..... ..... #...# #...# #...# .#### ....# .###.",
    "z": "..... ..... ##### ...#. ..#.. .#... ##### .....",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###. .....",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###. .....",
    "2": ".###. #...# ....# ...#. ..#.. .#... ##### .....",
    "3": "####. ....# ....# .###. ....# ....# ####. .....",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#. .....",
    "5": "##### #.... ####. ....# ....# #...# .###. .....",
    "6": "..##. .#... #.... ####. #...# #...# .###. .....",
    "7": "##### ....# ...#. ..#.. .#... .#... .#... .....",
    "8": ".###. #...# #...# .###. #...# #...# .###. .....",
    "9": ".###. #...# #...# .#### ....# ...#. .##.. .....",
    " ": "..... ..... ..... ..... ..... ..... ..... .....",
    ".": "..... ..... ..... ..... ..... .##.. .##.. .....",
    ",": "..... ..... ..... ..... ..... .##.. ..#.. .#...",
    ":": "..... .##.. .##.. ..... .##.. .##.. ..... .....",
    "%": "##... ##..# ...#. ..#.. .#... #..## ...## .....",
    "(": "...#. ..#.. .#... .#... .#... ..#.. ...#. .....",
    ")": ".#... ..#.. ...#. ...#. ...#. ..#.. .#... .....",
    "-": "..... ..... ..... ##### ..... ..... ..... .....",
    "=": "..... ..... ##### ..... ##### ..... ..... .....",
    "<": "...#. ..#.. .#... #.... .#... ..#.. ...#. .....",
    ">": ".#... ..#.. ...#. ....# ...#. ..#.. .#... .....",
    "/": "....# ...#. ...#. ..#.. .#... .#... #.... .....",
    "+": "..... ..#.. ..#.. ##### ..#.. ..#.. ..... .....",
    "_": "..... ..... ..... ..... ..... ..... ##### .....",
    "'": "..#.. ..#.. .#... ..... ..... ..... ..... .....",
}
_FONT = {ch: [row for row in rows.split()] for ch, rows in _GLYPHS.items()}

# Colour-blind-friendly palette (Okabe-Ito).
PALETTE: list[RGB] = [
    (0, 114, 178),
    (230, 159, 0),
    (0, 158, 115),
    (204, 121, 167),
    (86, 180, 233),
    (213, 94, 0),
    (240, 228, 66),
    (0, 0, 0),
]
WHITE: RGB = (255, 255, 255)
INK: RGB = (40, 40, 40)
GRID: RGB = (225, 225, 225)
REF: RGB = (200, 60, 60)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: RGB) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.w, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.h, max(y0, y1))
        row = bytes(colour) * (x1 - x0)
        for y in range(y0, y1):
            i = (y * self.w + x0) * 3
            self.px[i : i + len(row)] = row

    def text(self, x: int, y: int, s: str, colour: RGB = INK, scale: int = 2) -> int:
        """Draw s with its top-left at (x, y); return the width drawn."""
        cx = x
        for ch in s.lower():
            glyph = _FONT.get(ch, _FONT[" "])
            for r, row in enumerate(glyph):
                for c, cell in enumerate(row):
                    if cell == "#":
                        self.rect(
                            cx + c * scale, y + r * scale, cx + (c + 1) * scale, y + (r + 1) * scale, colour
                        )
            cx += 6 * scale
        return cx - x

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def text_width(s: str, scale: int = 2) -> int:
    return len(s) * 6 * scale


def speedup_chart(
    title: str, groups: Sequence[str], series: Sequence[str], values: Sequence[Sequence[float]]
) -> bytes:
    """Grouped bars as a PNG file's bytes (the caller writes them): values[g][s] is the speedup
    of series s in group g; 1.0x is marked."""
    bar, gap, left, top, bottom = 22, 26, 90, 70, 80
    plot_h = 320
    group_w = max(len(series) * bar, max((text_width(g) for g in groups), default=0)) + gap
    legend_w = max([text_width("target alone"), *(text_width(s) for s in series)]) + 60
    width = left + max(1, len(groups)) * group_w + legend_w + 20
    height = top + plot_h + bottom
    vmax = max([1.5, *(v for row in values for v in row)])
    step = 0.25 if vmax <= 2.0 else 0.5 if vmax <= 4 else 1.0
    vmax = (int(vmax / step) + 1) * step
    c = Canvas(width, height)
    c.text(left, 16, title, scale=3)

    def y_of(v: float) -> int:
        return top + plot_h - int(plot_h * v / vmax)

    tick = 0.0
    while tick <= vmax + 1e-9:  # grid lines and axis labels
        y = y_of(tick)
        c.rect(left, y, left + len(groups) * group_w, y + 1, GRID)
        label = f"{tick:.2f}x"
        c.text(left - text_width(label) - 8, y - 8, label)
        tick += step
    for g, name in enumerate(groups):
        x0 = left + g * group_w + gap // 2
        for s, v in enumerate(values[g]):
            x = x0 + s * bar
            c.rect(x + 2, y_of(v), x + bar - 2, y_of(0), PALETTE[s % len(PALETTE)])
        c.text(x0 + (len(series) * bar - text_width(name)) // 2, top + plot_h + 12, name)
    ref = y_of(1.0)  # the target alone
    for x in range(left, left + len(groups) * group_w, 8):
        c.rect(x, ref - 1, x + 4, ref + 1, REF)
    c.rect(left, top, left + 1, top + plot_h, INK)
    c.rect(left, top + plot_h, left + len(groups) * group_w, top + plot_h + 1, INK)
    lx = left + len(groups) * group_w + 20
    for s, name in enumerate(series):
        y = top + 10 + s * 26
        c.rect(lx, y, lx + 16, y + 16, PALETTE[s % len(PALETTE)])
        c.text(lx + 24, y, name)
    y = top + 10 + len(series) * 26 + 10
    c.rect(lx, y + 7, lx + 16, y + 9, REF)
    c.text(lx + 24, y, "target alone")
    c.text(left, height - 30, "decode tokens/s relative to the target alone (higher is faster)")
    return c.png()
