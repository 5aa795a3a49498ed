"""Test doubles and helpers shared by the test folders: recording stand-ins of the CUDA
driver and libraries, host-compiled kernels, kernel checks, the model zoo and the ONNX node
suite runner. ``tests/conftest.py`` puts ``tests/`` on the path, so tests import them as
``support.<module>``."""
