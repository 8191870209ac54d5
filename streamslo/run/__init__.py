"""A run as the parent process sees it: starting it (:mod:`~streamslo.run.execute`, the target's
:mod:`~streamslo.run.preflight`), watching it (:mod:`~streamslo.run.watch`,
:mod:`~streamslo.run.progress`, :mod:`~streamslo.run.exporter`), the target's evidence
(:mod:`~streamslo.run.evidence`, :mod:`~streamslo.run.freed`), children and stop signals
(:mod:`~streamslo.run.childproc`, :mod:`~streamslo.run.signals`). The files both sides of a run
share, and its end, are :mod:`streamslo.runfiles`; the Locust side imports those, never this.
"""

__all__: list[str] = []
