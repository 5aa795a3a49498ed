"""Collage on the IR: candidates from a module's functions, the search's plan applied as
partitions (``partitioner``), and candidates measured by compiling them and profiling
their launch plans (``measure``). The IR-independent core (graph, rules, search, costs) is
``partita.collage``."""
