"""Reference ONNX models, tokenizer and manifest, shipped as package data (``microbatch models build``)."""
