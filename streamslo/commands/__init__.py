"""The shells of every command, one module each, with ``add_arguments(parser)`` and
``main(args)`` (:mod:`streamslo.cli` dispatches, importing only the chosen one): ``serve``,
``run``, ``verify``, ``report``, ``compare``, ``soak``, ``sweep``, ``proxy``, ``finalize`` and
``check``. They are independent of each other; what they drive lives below them (executing a
run: :mod:`streamslo.run.execute`; the server: :mod:`streamslo.server.launch`; the proxy:
:mod:`streamslo.proxy`; the report: :mod:`streamslo.reports`; the SLO checks:
:mod:`streamslo.verify`; the contract checks: :mod:`streamslo.check`).
"""

__all__: list[str] = []
