"""Files: atomic writes and the streamed table writers (``.npy``, ``.npz``, ``.safetensors``)
with the spec each file records."""
