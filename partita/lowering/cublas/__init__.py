"""cuBLAS partitions: cuBLASLt matmul records (codegen) and their runtime handle."""
