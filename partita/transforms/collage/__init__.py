"""Collage on the IR: candidates from a module's functions, the search's plan applied as
partitions (``partitioner``), and candidates measured by compiling them
(``measure``, ``library_timing``). The IR-independent core (graph, rules, search, costs) is
``partita.collage``."""
