"""rtxd._proto: the protocol modules generated from rtx/v1/*.proto at build time (setup.py)
live in rtxd._proto.rtx.v1; use them through rtxd.proto."""
