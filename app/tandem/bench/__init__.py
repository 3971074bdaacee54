"""`tandem bench`: speculative decoding against the target alone, measured honestly.

prompts.py loads prompt sets, settings.py names the configurations compared, runner.py runs
them (alternating, in one process), report.py turns runs into speedups and the cost model's
prediction, chart.py draws the result as a PNG.
"""
