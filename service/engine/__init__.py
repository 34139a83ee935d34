"""The engine: an ONNX Runtime session (CUDA first, CPU as the fallback) and the model it serves.

Only this package imports onnxruntime.
"""

from service.engine.model import blamed_setting, load_model, model_setting, warm_up
from service.engine.providers import choose_providers, cuda_device_count
from service.engine.session import Engine

__all__ = [
    "Engine",
    "blamed_setting",
    "choose_providers",
    "cuda_device_count",
    "load_model",
    "model_setting",
    "warm_up",
]
