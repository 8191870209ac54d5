"""The options of a run, declared once: the table (:mod:`~streamslo.options.run_options`, which derives
the command line, the scenario keys and ``docs/cli.md``), its value types
(:mod:`~streamslo.options.values`), durations and counts (:mod:`~streamslo.options.units`),
stages (:mod:`~streamslo.options.stages`), length distributions
(:mod:`~streamslo.options.lengths`) and secrets (:mod:`~streamslo.options.redact`).
"""

__all__: list[str] = []
