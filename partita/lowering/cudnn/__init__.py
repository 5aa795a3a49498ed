"""cuDNN partitions: frontend graph records (codegen) and their runtime handle."""
