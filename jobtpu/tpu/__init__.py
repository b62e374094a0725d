"""TPU machines: the Cloud TPU API, node specs, bringing nodes up and back, repairs."""
