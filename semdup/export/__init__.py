"""Trained checkpoints → verified ONNX model bundles (torch).

    onnx_export.py     torch → ONNX and checkpoint → bundle
    base_encoder_bundle.py   a named pre-trained encoder (semdup.training.base_encoders) → bundle
    parity.py          ONNX vs torch differences on real posts
    quantize.py        optional dynamic int8, shipped only with its measured MAP change

Learning and fitting bundles is :mod:`semdup.learn`; loading and serving one is :mod:`semdup.bundle` (torch-free).
"""
