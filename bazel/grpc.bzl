"""cc_grpc_library: C++ code for .proto files from the system protoc and grpc_cpp_plugin."""

def cc_grpc_library(name, srcs, deps = [], **kwargs):
    bases = [s[:-len(".proto")] for s in srcs]
    hdrs = [b + ".pb.h" for b in bases] + [b + ".grpc.pb.h" for b in bases]
    ccs = [b + ".pb.cc" for b in bases] + [b + ".grpc.pb.cc" for b in bases]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = hdrs + ccs,
        # Import paths are workspace-relative, so "proto/jobs.proto" -> #include "proto/jobs.pb.h".
        cmd = "protoc -I. --cpp_out=$(GENDIR) --grpc_out=$(GENDIR)" +
              " --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) $(SRCS)",
        message = "protoc+grpc " + name,
    )
    native.cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        deps = deps + ["@sys//:grpc++", "@sys//:protobuf"],
        **kwargs
    )
