"""
The descriptor pool of rtxd's generated protocol modules.

setup.py points the generated *_pb2 modules here instead of at protobuf's default pool
(`_descriptor_pool.Default()` then means this module's Default()), so the rtx.v1 descriptors of
this package never meet another copy of rtx/v1/*.proto that a program may load from elsewhere.
"""

from google.protobuf import descriptor_pool

_POOL = descriptor_pool.DescriptorPool()


def Default() -> descriptor_pool.DescriptorPool:  # noqa: N802 (the name the generated code calls)
    """rtxd's pool, which the generated modules add their files to."""
    return _POOL
