"""Frontends: import models from other frameworks (PyTorch, ONNX) into a graph Module."""
