"""What ``semdup learn`` and ``semdup fit-default`` run: candidates, out-of-fold figures, the gate, the fusion fit,
the learned and the hybrid default bundles. Export (checkpoint → verified ONNX bundle) is :mod:`semdup.export`."""
