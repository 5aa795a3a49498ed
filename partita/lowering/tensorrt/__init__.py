"""TensorRT partitions: each one an embedded ONNX sub-model, an engine built at load."""
