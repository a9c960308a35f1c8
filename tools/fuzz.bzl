"""libFuzzer targets that double as corpus regression tests.

kolo_fuzzer(name = "foo_fuzzer", srcs = ["foo_fuzzer.cc"], deps = [...]) makes:
  - `foo_fuzzer`: the libFuzzer binary (tags "manual" and "fuzz"; built only
    with --config=fuzz, by scripts/fuzz.sh);
  - `foo_fuzzer_corpus_test`: a cc_test that runs every file of the seed
    corpus (testdata/fuzz/foo_fuzzer/) through the same entry point with a
    plain main(), so the ordinary suite replays the corpus under any compiler.
The source defines LLVMFuzzerTestOneInput and nothing else.
"""

def kolo_fuzzer(name, srcs, deps = [], corpus = None):
    corpus = corpus or "testdata/fuzz/" + name
    native.filegroup(
        name = name + "_corpus",
        srcs = native.glob([corpus + "/*"]),
        testonly = True,
    )
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = deps + ["//tools/fuzz:fuzz_input"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzz"],
    )
    native.cc_test(
        name = name + "_corpus_test",
        srcs = srcs,
        deps = deps + ["//tools/fuzz:fuzz_input", "//tools/fuzz:replay_main"],
        data = [":" + name + "_corpus"],
        args = ["$(rootpaths :%s_corpus)" % name],
        size = "small",
    )
