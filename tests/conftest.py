"""Suite-wide fixtures."""

from gpu_guard import gpu_tests_run_on_the_gpu  # noqa: F401 - an autouse fixture
