"""IR-independent core of the Collage partitioner.

* :mod:`partita.collage.graph` -- the data-flow graph abstraction and reachability.
* :mod:`partita.collage.search` -- candidates, native fusion, combining, optimal cover search.
* :mod:`partita.collage.cost` -- roofline / measuring / cached / mock cost estimators.
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
from partita.collage.search import (
    ELEMENTWISE_OPS,
    Candidate,
    PartitionError,
    Plan,
    brute_force_search,
    combine_candidates,
    enumerate_native_candidates,
    search,
)

__all__ = [
    "ELEMENTWISE_OPS",
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
