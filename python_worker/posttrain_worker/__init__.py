"""posttrain worker: the PyTorch side of the posttrain TypeScript SDK."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
