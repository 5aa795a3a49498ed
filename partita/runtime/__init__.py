"""Running lowered modules: one launch plan (``plan``), two devices (``cuda``: the
driver API; ``device``: the simulated CPU device), step kinds per compiled extern
function (``extern``), arrays across the boundary (``interop``), and the NumPy
reference executor (``reference``), the ground truth of the tests."""
