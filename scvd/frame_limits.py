"""Frame size limits of protocol version 1: the wire contract's and the configuration's defaults.

A module of its own so that the configuration, read before READY=1, need not build the
protocol's Structs and decoders (`protocol.py` re-exports both).
"""

DEFAULT_CLIENT_FRAME_LIMIT = 1 << 20  # 1 MiB
DEFAULT_SERVER_FRAME_LIMIT = 8 << 20  # 8 MiB
