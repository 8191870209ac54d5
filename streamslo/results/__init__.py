"""The results directory of a run (``docs/results.md``): the lowest layer above the stream core.

:mod:`~streamslo.results.layout` says where every file lives and loads a run;
:mod:`~streamslo.results.writer` writes rows and gaps as the run goes, in the compact batches of
:mod:`~streamslo.results.batch`; :mod:`~streamslo.results.gaps` merges the ``gaps.parquet`` part
files; :mod:`~streamslo.results.schema` types ``run.json`` and ``summary.json``;
:mod:`~streamslo.results.summary_table` is the plain-text summary a run prints.
"""

__all__: list[str] = []
