"""Analyses over the dialects, shared by the passes above and the runtime: buffer
liveness (the memory plan's and the launch plan's) and the shape rules that size results
from input dims (shape functions at compile time, host steps at run time)."""
