"""Triton kernels, each beside its plain-torch reference (`ref_*`).

On CUDA tensors the engine runs these kernels; on CPU it runs torch code (the
references or the engine's own torch path). Tests run every kernel on CPU under
Triton's interpreter (`TRITON_INTERPRET=1`) against its reference.
"""
