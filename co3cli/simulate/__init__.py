"""Simulators: federated training through the codec (``fl``) and its compressors."""
