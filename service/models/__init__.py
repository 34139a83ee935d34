"""Reference ONNX models, tokenizer and manifest, shipped as package data (rebuilt by ``make models`` in a
source checkout)."""
