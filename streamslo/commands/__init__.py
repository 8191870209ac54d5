"""The shells of the load commands: ``run``, ``compare``, ``soak``, ``sweep`` and ``finalize``, one module
each, with ``add_arguments(parser)`` and ``main(args)`` (:mod:`streamslo.cli` dispatches),
independent of each other (what they share, executing a run, is :mod:`streamslo.run.execute`). The
other commands' shells live beside what they drive: ``serve`` in
:mod:`streamslo.server.launch`, ``proxy`` in :mod:`streamslo.proxy.command`, ``report`` in
:mod:`streamslo.reports.command`, ``verify`` in :mod:`streamslo.verify.command`.
"""

__all__: list[str] = []
