"""Compiles .proto files with the system protoc and grpc_cpp_plugin."""

def kolo_proto_library(name, srcs, deps = [], grpc = True, visibility = None):
    """A cc_library `name` holding the C++ messages (and gRPC stubs) of `srcs`.

    `srcs` are paths relative to this package; imports resolve from the
    workspace root, so `import "proto/kolo/v1/x.proto"` works everywhere.
    """
    outs = []
    hdrs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.cc", base + ".pb.h"]
        hdrs.append(base + ".pb.h")
        if grpc:
            outs += [base + ".grpc.pb.cc", base + ".grpc.pb.h"]
            hdrs.append(base + ".grpc.pb.h")

    pkg = native.package_name()
    grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = " ".join([
            "/usr/bin/protoc",
            "-I.",
            "--cpp_out=$(GENDIR)",
            grpc_flags,
        ] + ["%s/%s" % (pkg, s) for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps], visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = hdrs,
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
        copts = ["-Wno-error"],
        visibility = visibility,
    )
