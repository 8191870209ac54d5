"""A run as the parent process sees it: watching it (:mod:`~streamslo.run.watch`,
:mod:`~streamslo.run.progress`, :mod:`~streamslo.run.exporter`, ``windows.csv`` and ``live.json``
in :mod:`~streamslo.run.windows_file`), the target's evidence (:mod:`~streamslo.run.evidence`),
children and stop signals (:mod:`~streamslo.run.childproc`, :mod:`~streamslo.run.signals`) and
its end (:mod:`~streamslo.run.finalize`, :mod:`~streamslo.run.soak_results`).
"""

__all__: list[str] = []
