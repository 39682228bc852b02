"""
rtxd.proto: the rtx.v1 protocol modules, generated from the repository's proto/ when the
package was built (graph.proto, jobs.proto, admin.proto).

For what the typed API does not cover: the raw messages (`proto.jobs_pb2.SubmitRequest`) and
the gRPC stubs (`proto.admin_pb2_grpc.AdminStub(client.channel)`). The modules live in rtxd's
own descriptor pool, so their messages are not interchangeable with another copy of the same
.proto files compiled elsewhere: pass such messages as bytes (SerializeToString/FromString).
"""

from rtxd._proto.rtx.v1 import admin_pb2, admin_pb2_grpc, graph_pb2, jobs_pb2, jobs_pb2_grpc

__all__ = ["admin_pb2", "admin_pb2_grpc", "graph_pb2", "jobs_pb2", "jobs_pb2_grpc"]
