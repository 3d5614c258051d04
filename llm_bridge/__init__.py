"""llm_bridge: otspec verifiers on real Hugging Face model pairs (CPU or GPU).

Placeholder for the bridge described in the roadmap; the verifiers it will use
already accept torch tensors on any device (see :mod:`otspec.verifiers`).
"""
