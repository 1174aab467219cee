"""The generated C API, used from a hand-written C program as a firmware engineer would."""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import make_model, onnxruntime_outputs

import aot

STRICT = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]

# Uses the API from the header only: struct fields in ONNX order with sanitized names, size macros,
# error codes, and two threads running the model at once in separate workspaces.
PROGRAM = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "net.h"

static float image[NET_INPUT_INPUT_1_SIZE], extra[NET_INPUT__1X_SIZE];
static float a0[NET_OUTPUT_HEAD_B_SIZE], a1[NET_OUTPUT_HEAD_A_SIZE];
static float b0[NET_OUTPUT_HEAD_B_SIZE], b1[NET_OUTPUT_HEAD_A_SIZE];
static unsigned char ws[2][NET_WORKSPACE_SIZE + NET_WORKSPACE_ALIGN] __attribute__((aligned(64)));
static const int shape[] = NET_INPUT_INPUT_1_SHAPE;

struct job { net_outputs out; void *workspace; int32_t rc; };

static void *work(void *arg)
{
    struct job *j = arg;
    net_inputs in;
    int i;
    in.input_1 = image;
    in._1x = extra;
    for (i = 0; i < 50 && j->rc == 0; i++)
        j->rc = net_run(&in, &j->out, j->workspace);
    return NULL;
}

int main(void)
{
    net_inputs in;
    net_outputs out;
    struct job jobs[2];
    pthread_t threads[2];
    FILE *f;
    int i;
    if (NET_NUM_INPUTS != 2 || NET_NUM_OUTPUTS != 2 || NET_INPUT_INPUT_1_RANK != 4 || shape[1] != 3
        || NET_INPUT_INPUT_1_BYTES != sizeof image || strcmp(NET_OUTPUT_HEAD_A_DTYPE, "float32") != 0)
        return 10;
    f = fopen("inputs.bin", "rb");
    if (f == NULL || fread(image, sizeof image, 1, f) != 1 || fread(extra, sizeof extra, 1, f) != 1)
        return 11;
    fclose(f);
    in.input_1 = image;
    in._1x = extra;
    out.head_b = a0;
    out.head_a = a1;
    if (net_run(NULL, &out, ws[0]) != NET_ERR_NULL) return 12;
    if (net_run(&in, &out, NULL) != NET_ERR_NULL) return 13;
    in.input_1 = NULL;
    if (net_run(&in, &out, ws[0]) != NET_ERR_NULL) return 14;
    in.input_1 = image;
    if (net_run(&in, &out, ws[0] + 1) != NET_ERR_ALIGN) return 15;
    in._1x = (const float *)((const char *)extra + 2);
    if (net_run(&in, &out, ws[0]) != NET_ERR_ALIGN) return 16;
    in._1x = extra;
    jobs[0].out.head_b = a0; jobs[0].out.head_a = a1; jobs[0].workspace = ws[0]; jobs[0].rc = 0;
    jobs[1].out.head_b = b0; jobs[1].out.head_a = b1; jobs[1].workspace = ws[1]; jobs[1].rc = 0;
    for (i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, work, &jobs[i]);
    for (i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    if (jobs[0].rc != NET_OK || jobs[1].rc != NET_OK) return 17;
    if (memcmp(a0, b0, sizeof a0) != 0 || memcmp(a1, b1, sizeof a1) != 0) return 18;
    f = fopen("outputs.bin", "wb");
    fwrite(a0, sizeof a0, 1, f);
    fwrite(a1, sizeof a1, 1, f);
    fclose(f);
    return 0;
}
"""


def two_headed_model():
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["input.1", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc"], ["head-a"], name="fc_a"),
        helper.make_node("Add", ["head-a", "1x"], ["head.b"], name="add"),
    ]
    inits = {"w": rng.standard_normal((6, 3, 3, 3)).astype(np.float32),
             "fc": rng.standard_normal((6, 4)).astype(np.float32)}
    # Outputs listed out of computation order: the struct must follow the ONNX graph order.
    return make_model(nodes, {"input.1": (1, 3, 9, 9), "1x": (1, 4)}, {"head.b": (1, 4), "head-a": (1, 4)}, inits)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return aot.build(two_headed_model(), target="host", out_dir=tmp_path_factory.mktemp("b") / "net", name="net")


def test_object_has_no_undefined_symbols(artifact):
    undefined = subprocess.run(["nm", "-u", str(artifact.object)], capture_output=True, text=True, check=True)
    assert undefined.stdout.strip() == ""
    defined = subprocess.run(["nm", "-g", "--defined-only", str(artifact.object)], capture_output=True, text=True)
    assert all(line.split()[-1].startswith("net_") for line in defined.stdout.splitlines())


def test_header_declares_the_documented_api(artifact):
    header = artifact.header.read_text()
    assert "int32_t net_run(const net_inputs *in, net_outputs *out, void *workspace);" in header
    pointers = [line for line in header.splitlines() if line.strip().startswith(("const float *", "float *"))]
    fields = [line.split("*")[1].split(";")[0] for line in pointers]
    assert fields == ["input_1", "_1x", "head_b", "head_a"]
    assert "#define NET_WORKSPACE_SIZE" in header and "#define NET_WORKSPACE_ALIGN" in header
    assert "malloc" not in artifact.source.read_text()


def test_program_using_the_api(artifact, tmp_path):
    model = two_headed_model()
    rng = np.random.default_rng(5)
    inputs = {"input.1": rng.standard_normal((1, 3, 9, 9)).astype(np.float32),
              "1x": rng.standard_normal((1, 4)).astype(np.float32)}
    (tmp_path / "main.c").write_text(PROGRAM)
    (tmp_path / "inputs.bin").write_bytes(inputs["input.1"].tobytes() + inputs["1x"].tobytes())
    build = subprocess.run([*STRICT, f"-I{artifact.dir}", "main.c", str(artifact.source), str(artifact.object),
                            "-lpthread", "-o", "prog"], cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run(["./prog"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr}"
    got = np.frombuffer((tmp_path / "outputs.bin").read_bytes(), np.float32)
    ref = onnxruntime_outputs(model, inputs)
    expected = np.concatenate([ref["head.b"].ravel(), ref["head-a"].ravel()])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_a_model_without_inputs_whose_output_is_a_constant(tmp_path):
    """Everything folded: the output is a constant, copied out by the one kernel; no inputs at all."""
    from onnx import TensorProto, helper

    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = helper.make_node("Constant", [], ["y"], value=onnx.numpy_helper.from_array(values))
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    outputs = aot.run(model, {}, out_dir=tmp_path / "b")
    np.testing.assert_array_equal(outputs["y"], values)
