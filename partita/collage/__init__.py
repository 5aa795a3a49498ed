"""IR-independent core of the Collage partitioner.

* :mod:`partita.collage.graph` -- the data-flow graph abstraction and reachability.
* :mod:`partita.collage.search` -- candidates and the optimal cover search (plus a simple
  IR-free candidate generator for tests and benchmarks; ``combine_candidates``, its
  unions, is a use of the rule algebra's ``Combine``).
* :mod:`partita.collage.rules` -- the partition-rule algebra the partitioner builds its
  candidates with (TVM's ``partition_rule.h``), one rule a module.
* :mod:`partita.collage.coalesce` -- MaxCoalesce after the search.
* :mod:`partita.collage.cost` -- roofline / measuring / cached / mock cost estimators, and
  the host-copy charge of host placements.
"""

from partita.collage.cost import (
    CostCache,
    CostEstimator,
    MeasuringEstimator,
    MockEstimator,
    RooflineEstimator,
    load_devices,
    structural_key,
)
from partita.collage.graph import DataflowGraph, NodeInfo, TensorInfo
from partita.collage.rules.combine import combine_candidates
from partita.collage.search import (
    Candidate,
    PartitionError,
    Plan,
    brute_force_search,
    enumerate_native_candidates,
    search,
)

__all__ = [
    "Candidate",
    "CostCache",
    "CostEstimator",
    "DataflowGraph",
    "MeasuringEstimator",
    "MockEstimator",
    "NodeInfo",
    "PartitionError",
    "Plan",
    "RooflineEstimator",
    "TensorInfo",
    "brute_force_search",
    "combine_candidates",
    "enumerate_native_candidates",
    "load_devices",
    "search",
    "structural_key",
]
