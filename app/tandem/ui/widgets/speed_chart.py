"""The demo's chart: the speculative run's decode speed against the target alone's, as bars
relative to the target alone, the measure `tandem bench --chart` draws per category; plotext
draws it in the terminal (textual-plotext)."""

from __future__ import annotations

from textual_plotext import PlotextPlot

BARS = ("target alone", "target + draft")


class SpeedChart(PlotextPlot):
    """Hidden until `show` is given both speeds; `clear` hides it again."""

    def show(self, base_tps: float, spec_tps: float) -> None:
        plt = self.plt
        plt.clear_data()
        speedup = spec_tps / base_tps
        plt.bar(BARS, [1.0, speedup], orientation="horizontal", width=0.4)
        plt.title("decode tokens/s, relative to the target alone")
        top = max(1.5, speedup * 1.1)
        step = 0.25 if top <= 2 else 0.5 if top <= 4 else 1.0
        ticks = [i * step for i in range(int(top / step) + 1)]
        plt.xticks(ticks, [f"{t:g}x" for t in ticks])
        plt.xlim(0, top)
        self.add_class("-on")
        self.refresh()

    def clear(self) -> None:
        self.plt.clear_data()
        self.remove_class("-on")
