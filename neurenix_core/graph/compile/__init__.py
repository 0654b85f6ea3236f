"""``nx.compile`` and what it stands on: ``options`` (validated compile options), ``placement``
(which device runs which node), ``host_select`` (cpu:0's host runtimes), ``inputs`` (the
compiled-input rule), ``executor`` (eager graphs), ``buckets`` (shape buckets), ``cache`` (the
persistent compile cache), ``artifact*`` (compiled artifacts on disk) and the compiled model
itself (``compiler``). Empty on purpose: import the module you need."""
